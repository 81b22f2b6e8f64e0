//! `/proc/PID/maps` lines.

use std::path::PathBuf;

/// One memory mapping of the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub executable: bool,
    /// Offset in the mapped file.
    pub offset: u64,
    /// The mapped file, when it is one.
    pub path: Option<PathBuf>,
    /// The mapped file's device (as `st_dev`) and inode, where the mappings say them (a
    /// process's do, a core's do not).
    pub inode: Option<(u64, u64)>,
}

/// Parses the text of `/proc/PID/maps`; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut fields = line.splitn(6, ' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let dev = fields.next()?;
    let inode = fields.next()?.parse::<u64>().ok()?;
    let path = fields.next().map(str::trim).filter(|p| p.starts_with('/')).map(PathBuf::from);
    let (major, minor) = dev.split_once(':')?;
    let dev = libc::makedev(u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?);
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        readable: perms.starts_with('r'),
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        offset,
        inode: path.as_ref().map(|_| (dev, inode)),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_and_anonymous_mappings() {
        let text = "5555e000-5556f000 r-xp 00001000 08:01 1234   /usr/bin/prog\n\
                    7ffd0000-7ffd2000 rw-p 00000000 00:00 0      [stack]\n\
                    garbage\n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 2);
        assert_eq!(maps[0].start, 0x5555e000);
        assert!(maps[0].executable && maps[0].readable);
        assert_eq!(maps[0].offset, 0x1000);
        assert_eq!(maps[0].path.as_deref(), Some(std::path::Path::new("/usr/bin/prog")));
        assert_eq!(maps[0].inode, Some((libc::makedev(8, 1), 1234)));
        assert_eq!(maps[1].path, None);
        assert_eq!(maps[1].inode, None);
        assert!(!maps[1].executable);
    }
}
