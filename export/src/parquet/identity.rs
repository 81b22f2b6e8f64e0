//! The identities the tables carry: a snapshot's id, and the keys of names.
//!
//! Both are xxh3 hashes of text only, so they are the same wherever the text is: re-exporting a
//! snapshot gives the same id (and the same file names), and a type, root or path signature
//! named alike in two processes, or two builds, gets the same key.

use heapsnap_format::Metadata;
use xxhash_rust::xxh3::xxh3_64;

/// The snapshot's id: 16 lowercase hex digits of the xxh3 of what tells one snapshot from
/// another (its executable's build-id, else its path; its pid; when the world stopped; its host).
pub fn snapshot_id(meta: &Metadata, host: Option<&str>) -> String {
    let program = meta.build_id.as_deref().or(meta.executable.as_deref()).unwrap_or("");
    let pid = meta.pid.map_or_else(String::new, |p| p.to_string());
    let text = format!("{program}\0{pid}\0{}\0{}", meta.time_unix_ns, host.unwrap_or(""));
    format!("{:016x}", xxh3_64(text.as_bytes()))
}

/// The key of `name` in `space` (a grouping, `path` for path signatures): xxh3 of
/// `space "\0" name`, as the signed 64-bit integer Parquet's engines join on.
pub fn key(space: &str, name: &str) -> i64 {
    let mut text = Vec::with_capacity(space.len() + 1 + name.len());
    text.extend_from_slice(space.as_bytes());
    text.push(0);
    text.extend_from_slice(name.as_bytes());
    xxh3_64(&text) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_the_space_and_the_name_only() {
        assert_eq!(key("type", "Cache_leak.entry"), key("type", "Cache_leak.entry"));
        assert_ne!(key("type", "Cache_leak.entry"), key("root", "Cache_leak.entry"));
        assert_eq!(key("path", "x"), xxh3_64(b"path\0x") as i64, "the documented text is what is hashed");
    }
}
