//! Owner-only (0600) files written to a temporary file in the target's directory and renamed
//! into place when complete: an export never leaves half a file under its name.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct AtomicFile {
    target: PathBuf,
    writer: BufWriter<tempfile::NamedTempFile>,
}

impl AtomicFile {
    pub fn create(target: &Path) -> std::io::Result<AtomicFile> {
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target.file_name().unwrap_or_default().to_string_lossy().into_owned();
        // tempfile creates the file with O_EXCL and mode 0600.
        let tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".partial").tempfile_in(&dir)?;
        Ok(AtomicFile { target: target.to_path_buf(), writer: BufWriter::with_capacity(1 << 20, tmp) })
    }

    /// Flushes, then renames the temporary file over the target. Dropped without this call,
    /// the temporary file is removed and the target left as it was.
    pub fn commit(self) -> std::io::Result<u64> {
        let tmp = self.writer.into_inner().map_err(|e| e.into_error())?;
        let len = tmp.as_file().metadata()?.len();
        tmp.persist(&self.target).map_err(|e| e.error)?;
        Ok(len)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writer.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.writer.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn owner_only_and_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        std::fs::write(&target, "old").unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"new contents").unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old", "not replaced before commit");
        f.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new contents");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        let dropped = AtomicFile::create(&dir.path().join("never.txt")).unwrap();
        drop(dropped);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "an uncommitted file leaves nothing");
    }
}
