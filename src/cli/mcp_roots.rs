//! Where `heapsnap mcp` may read: the directories its client declares (MCP `roots`) and those
//! given with `--root DIR`. An agent can be steered by text it reads, so a path it names is
//! checked before any file is opened: no `..`, lexically under a root, and, once every link is
//! resolved, still under one. Errors name the path the agent gave, never what a file holds.

use std::path::{Component, Path, PathBuf};

#[derive(Default)]
pub struct Roots {
    /// `--root` directories.
    given: Vec<Root>,
    /// The client's `file://` roots (those that do not exist are left out).
    declared: Vec<Root>,
}

/// A root as it was named (made absolute), and with its links resolved.
struct Root {
    named: PathBuf,
    canonical: PathBuf,
}

impl Root {
    fn new(dir: &Path) -> std::io::Result<Root> {
        Ok(Root { named: std::env::current_dir()?.join(dir), canonical: dir.canonicalize()? })
    }
}

impl Roots {
    /// The `--root` directories, each of which must exist.
    pub fn given(dirs: &[PathBuf]) -> anyhow::Result<Roots> {
        let given = dirs
            .iter()
            .map(|dir| {
                let root = Root::new(dir).map_err(|e| anyhow::anyhow!("--root {}: {e}", dir.display()))?;
                if !root.canonical.is_dir() {
                    anyhow::bail!("--root {}: not a directory", dir.display());
                }
                Ok(root)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Roots { given, declared: Vec::new() })
    }

    /// The client's answer to `roots/list` (it replaces the previous one): its `file://` URIs.
    pub fn declare(&mut self, uris: &[&str]) {
        self.declared = uris.iter().filter_map(|uri| file_uri_path(uri)).filter_map(|p| Root::new(&p).ok()).collect();
    }

    fn all(&self) -> impl Iterator<Item = &Root> {
        self.given.iter().chain(&self.declared)
    }

    /// `path` (relative to the working directory) made absolute with its links resolved, when
    /// it is under a root; else why it may not be read.
    pub fn check(&self, path: &Path) -> Result<PathBuf, String> {
        if self.all().next().is_none() {
            return Err(format!(
                "{}: refused: this server reads snapshots only under the roots its client declares (MCP roots) or the directories given with `heapsnap mcp --root DIR`, and it has none",
                path.display()
            ));
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(format!("{}: refused: a path with `..` in it is not read; give it from one of the roots", path.display()));
        }
        let absolute = std::env::current_dir().map_err(|e| format!("{}: {e}", path.display()))?.join(path);
        // Checked before the file is touched, so that nothing outside says whether it exists.
        if !self.all().any(|root| absolute.starts_with(&root.named) || absolute.starts_with(&root.canonical)) {
            return Err(self.outside(path));
        }
        let resolved = absolute.canonicalize().map_err(|e| format!("{}: {e}", path.display()))?;
        if !self.all().any(|root| resolved.starts_with(&root.canonical)) {
            return Err(format!("{}: refused: a link leads out of the roots ({})", path.display(), self.listed()));
        }
        Ok(resolved)
    }

    fn outside(&self, path: &Path) -> String {
        format!("{}: refused: outside the roots this server reads ({})", path.display(), self.listed())
    }

    fn listed(&self) -> String {
        self.all().map(|r| r.named.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// The path of a `file://` URI (`file:///home/a%20b` is `/home/a b`); `None` for another scheme
/// or a host other than the local one.
fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(decoded)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_are_decoded() {
        assert_eq!(file_uri_path("file:///home/a%20b/snaps"), Some(PathBuf::from("/home/a b/snaps")));
        assert_eq!(file_uri_path("file://localhost/tmp"), Some(PathBuf::from("/tmp")));
        assert_eq!(file_uri_path("https://example.com/tmp"), None);
        assert_eq!(file_uri_path("file://server/share"), None);
        assert_eq!(file_uri_path("file:///bad%2"), None);
    }

    #[test]
    fn paths_outside_through_links_or_with_dotdot_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("in.heapsnap"), "x").unwrap();
        std::fs::write(tmp.path().join("out.heapsnap"), "x").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("out.heapsnap"), root.join("link.heapsnap")).unwrap();
        let none = Roots::default();
        assert!(none.check(&root.join("in.heapsnap")).unwrap_err().contains("has none"));
        let roots = Roots::given(std::slice::from_ref(&root)).unwrap();
        assert_eq!(roots.check(&root.join("in.heapsnap")), Ok(root.canonicalize().unwrap().join("in.heapsnap")));
        assert!(roots.check(&tmp.path().join("out.heapsnap")).unwrap_err().contains("outside the roots"));
        assert!(roots.check(&root.join("link.heapsnap")).unwrap_err().contains("a link leads out"));
        assert!(roots.check(&root.join("sub/../in.heapsnap")).unwrap_err().contains("`..`"));
        let mut declared = Roots::default();
        declared.declare(&[&format!("file://{}", root.display())]);
        assert!(declared.check(&root.join("in.heapsnap")).is_ok());
        assert!(declared.check(&tmp.path().join("out.heapsnap")).is_err());
    }
}
