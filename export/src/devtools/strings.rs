//! The snapshot's string table: every node and edge name once, with the length the table will
//! have in the file (V8's loader reads it into one JavaScript string).

use rustc_hash::FxHashMap;

#[derive(Default)]
pub struct StringTable {
    ids: FxHashMap<String, u32>,
    pub list: Vec<String>,
    /// Bytes of the JSON text of the list (quotes, escapes and commas included).
    pub json_bytes: usize,
}

impl StringTable {
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.list.len() as u32;
        self.json_bytes += json_len(s) + 1;
        self.list.push(s.to_string());
        self.ids.insert(s.to_string(), id);
        id
    }

    /// [`StringTable::intern`] of a string made for the table.
    pub fn intern_owned(&mut self, s: String) -> u32 {
        if let Some(&id) = self.ids.get(&s) {
            return id;
        }
        let id = self.list.len() as u32;
        self.json_bytes += json_len(&s) + 1;
        self.list.push(s.clone());
        self.ids.insert(s, id);
        id
    }
}

fn escaped(c: char) -> Option<&'static str> {
    Some(match c {
        '"' => "\\\"",
        '\\' => "\\\\",
        '\n' => "\\n",
        '\r' => "\\r",
        '\t' => "\\t",
        _ => return None,
    })
}

/// Length of `s` as a JSON string (ASCII only: other characters as `\uXXXX`).
pub fn json_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            c if escaped(c).is_some() => 2,
            ' '..='~' => 1,
            c => 6 * c.len_utf16(),
        })
        .sum::<usize>()
}

/// Writes `s` as a JSON string of ASCII characters, so its length in the file is its length
/// in a JavaScript string.
pub fn write_json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        if let Some(e) = escaped(c) {
            out.extend_from_slice(e.as_bytes());
        } else if (' '..='~').contains(&c) {
            out.push(c as u8);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.extend_from_slice(format!("\\u{u:04x}").as_bytes());
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_to_ascii_and_counts_exactly() {
        for s in ["plain", "quo\"te\\", "tab\tnl\n", "caf\u{e9}", "\u{1f600}", "\u{1}"] {
            let mut out = Vec::new();
            write_json_string(&mut out, s);
            assert!(out.is_ascii(), "{s:?}");
            assert_eq!(out.len(), json_len(s), "{s:?}");
            let back: String = serde_json::from_slice(&out).unwrap();
            assert_eq!(back, s);
        }
        let mut t = StringTable::default();
        assert_eq!(t.intern("a"), 0);
        assert_eq!(t.intern("b"), 1);
        assert_eq!(t.intern("a"), 0);
        assert_eq!(t.json_bytes, 8);
    }
}
