//! An append-only file of whole records that never leaves a torn record in front of a later one.
//!
//! Both durable record files of the control plane (`__mirror_state` and the coordinators'
//! `records.log`) append CRC-framed records and replay them on open, stopping at the first torn
//! frame. That is only safe if a torn frame can never be *followed* by a good one: a short write
//! or ENOSPC in the middle of an append leaves partial bytes, and an append after them would be
//! unreachable on replay, silently dropping every later record.
//!
//! [`AppendFile`] keeps the length of the whole-record prefix (`valid_len`: everything an append
//! reported durable). Appends are positioned writes at `valid_len`; on any error (a write error,
//! a short write, an fsync error) the file is cut back to `valid_len` and the error returned, and
//! before every append the file's length is checked against `valid_len` and cut back if a
//! previous cut failed. So the bytes on disk are always whole records, plus at most one torn
//! tail from a crash, which replay drops.
//!
//! Files are created owner-only (0600), and an existing file is narrowed to it on open: the
//! mirror state holds each mirror's settings, source credentials included.
//!
//! Tests reach the write path through a small fault injector (`Faults`, test builds only) to
//! force "write N bytes then ENOSPC" and failing fsyncs.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of every record file: owner read/write only.
const OWNER_ONLY: u32 = 0o600;

/// The open file of a record store, positioned by `valid_len`.
#[derive(Debug)]
pub struct AppendFile {
    path: PathBuf,
    file: File,
    valid_len: u64,
    #[cfg(test)]
    faults: faults::Faults,
}

impl AppendFile {
    /// Opens `path` (creating it) for reading and positioned writes, returning its content.
    pub fn open(path: &Path) -> io::Result<(AppendFile, Vec<u8>)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(OWNER_ONLY)
            .open(path)?;
        if file.metadata()?.permissions().mode() & 0o777 != OWNER_ONLY {
            file.set_permissions(fs::Permissions::from_mode(OWNER_ONLY))?;
        }
        let len = file.metadata()?.len();
        let mut data = vec![0u8; len as usize];
        file.read_exact_at(&mut data, 0)?;
        Ok((
            AppendFile {
                path: path.to_path_buf(),
                file,
                valid_len: 0,
                #[cfg(test)]
                faults: faults::Faults::default(),
            },
            data,
        ))
    }

    /// Declares the first `len` bytes the whole-record prefix found by replay and cuts the
    /// file there (dropping a torn tail), durably.
    pub fn set_valid_len(&mut self, len: u64) -> io::Result<()> {
        self.valid_len = len;
        self.ensure_clean_tail()
    }

    /// Length of the whole-record prefix.
    pub fn valid_len(&self) -> u64 {
        self.valid_len
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `bytes` (whole records) after the last whole record and fsyncs. On `Ok` they are
    /// durable. On `Err` they are not part of the file: it was cut back to the previous whole
    /// record (or, if even that failed, will be before the next append), and the caller must
    /// treat the change as not made.
    pub fn append_durable(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.ensure_clean_tail()?;
        match self.write_and_sync(bytes) {
            Ok(()) => {
                self.valid_len += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                if let Err(cut) = self.cut_back() {
                    // The next append retries the cut before writing anything.
                    tracing::error!(
                        path = %self.path.display(),
                        error = %cut,
                        "cannot cut a failed append back to the last whole record"
                    );
                }
                Err(e)
            }
        }
    }

    /// Replaces the whole file with `bytes` atomically (temp file, fsync, rename, fsync dir).
    /// On `Err` before the rename, the current file is untouched and stays in use.
    pub fn replace(&mut self, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.path.with_extension("rewrite");
        let written = (|| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .mode(OWNER_ONLY)
                .open(&tmp)?;
            self.write_all_at(&f, bytes, 0)?;
            self.sync(&f)?;
            Ok::<File, io::Error>(f)
        })();
        let f = match written {
            Ok(f) => f,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if let Err(e) = fs::rename(&tmp, &self.path) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        // The name now points at the new file: use its handle (opened before the rename, so no
        // reopen can fail and leave appends going to the replaced inode).
        self.file = f;
        self.valid_len = bytes.len() as u64;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    fn ensure_clean_tail(&mut self) -> io::Result<()> {
        // One fstat per append (next to an fsync) to never write after leftover bytes.
        if self.file.metadata()?.len() != self.valid_len {
            self.cut_back()?;
        }
        Ok(())
    }

    fn cut_back(&mut self) -> io::Result<()> {
        #[cfg(test)]
        self.faults.on_cut()?;
        self.file.set_len(self.valid_len)?;
        self.file.sync_all()
    }

    fn write_and_sync(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all_at(&self.file, bytes, self.valid_len)?;
        self.sync(&self.file)
    }

    fn write_all_at(&self, f: &File, mut bytes: &[u8], mut at: u64) -> io::Result<()> {
        while !bytes.is_empty() {
            #[cfg(test)]
            let allowed = self.faults.on_write(bytes.len())?;
            #[cfg(not(test))]
            let allowed = bytes.len();
            match f.write_at(&bytes[..allowed], at) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    bytes = &bytes[n..];
                    at += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn sync(&self, f: &File) -> io::Result<()> {
        #[cfg(test)]
        self.faults.on_sync()?;
        f.sync_data()
    }

    /// Test hook: the fault plan shared with this file.
    #[cfg(test)]
    pub(crate) fn faults(&self) -> faults::Faults {
        self.faults.clone()
    }
}

/// A size-limited tmpfs mounted for a test (real ENOSPC), unmounted on drop.
#[cfg(test)]
pub(crate) struct Tmpfs(tempfile::TempDir);

#[cfg(test)]
impl Tmpfs {
    /// `Err` when mounting is not permitted here (the caller skips and says so).
    pub(crate) fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Tmpfs(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }

    /// Fills the file system with `<dir>/filler` until ENOSPC; remove it to free the space.
    pub(crate) fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path().join("filler");
        let mut f = File::create(&filler).expect("create filler");
        while f.write_all(&[7u8; 1024]).is_ok() {}
        let _ = f.sync_all();
        filler
    }
}

#[cfg(test)]
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[cfg(test)]
pub(crate) mod faults {
    //! Fault injection for the write path: short writes followed by ENOSPC, failing fsyncs,
    //! failing cut-backs.

    use std::io;
    use std::sync::{Arc, Mutex};

    #[derive(Debug, Default)]
    struct Plan {
        /// Bytes still allowed to reach the file; `Some(0)` fails writes with ENOSPC.
        write_budget: Option<usize>,
        fail_syncs: u32,
        fail_cuts: u32,
    }

    /// A shared, armable fault plan (cloned handles arm the same plan).
    #[derive(Debug, Default, Clone)]
    pub(crate) struct Faults(Arc<Mutex<Plan>>);

    fn enospc() -> io::Error {
        io::Error::from_raw_os_error(28)
    }

    impl Faults {
        /// Let `n` more bytes through, then fail every write with ENOSPC (disk full).
        pub(crate) fn disk_full_after(&self, n: usize) {
            self.0.lock().unwrap().write_budget = Some(n);
        }
        /// Free the disk again.
        pub(crate) fn disk_freed(&self) {
            self.0.lock().unwrap().write_budget = None;
        }
        /// Fail the next `n` fsyncs with EIO.
        pub(crate) fn fail_syncs(&self, n: u32) {
            self.0.lock().unwrap().fail_syncs = n;
        }
        /// Fail the next `n` cut-backs (truncations) with EIO.
        pub(crate) fn fail_cuts(&self, n: u32) {
            self.0.lock().unwrap().fail_cuts = n;
        }

        pub(super) fn on_write(&self, want: usize) -> io::Result<usize> {
            let mut p = self.0.lock().unwrap();
            match &mut p.write_budget {
                None => Ok(want),
                Some(0) => Err(enospc()),
                Some(b) => {
                    let n = want.min(*b);
                    *b -= n;
                    Ok(n)
                }
            }
        }

        pub(super) fn on_sync(&self) -> io::Result<()> {
            let mut p = self.0.lock().unwrap();
            if p.fail_syncs > 0 {
                p.fail_syncs -= 1;
                return Err(io::Error::from_raw_os_error(5));
            }
            Ok(())
        }

        pub(super) fn on_cut(&self) -> io::Result<()> {
            let mut p = self.0.lock().unwrap();
            if p.fail_cuts > 0 {
                p.fail_cuts -= 1;
                return Err(io::Error::from_raw_os_error(5));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_append_is_cut_back_and_the_next_append_follows_the_last_whole_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (mut f, data) = AppendFile::open(&path).unwrap();
        assert!(data.is_empty());
        f.append_durable(b"aaaa").unwrap();
        let faults = f.faults();
        faults.disk_full_after(2);
        let e = f.append_durable(b"bbbb").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28));
        assert_eq!(fs::read(&path).unwrap(), b"aaaa");
        faults.disk_freed();
        f.append_durable(b"cccc").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"aaaacccc");
    }

    #[test]
    fn failed_fsync_is_reported_and_cut_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (mut f, _) = AppendFile::open(&path).unwrap();
        f.faults().fail_syncs(1);
        assert!(f.append_durable(b"xx").is_err());
        assert_eq!(fs::read(&path).unwrap(), b"");
        f.append_durable(b"yy").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"yy");
    }

    #[test]
    fn failed_cut_back_is_retried_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (mut f, _) = AppendFile::open(&path).unwrap();
        f.append_durable(b"ok").unwrap();
        let faults = f.faults();
        faults.disk_full_after(3);
        faults.fail_cuts(1);
        assert!(f.append_durable(b"torn-record").is_err());
        // The cut failed: the torn bytes are still there...
        assert_eq!(fs::read(&path).unwrap(), b"oktor");
        faults.disk_freed();
        // ...and are removed before anything else is written.
        f.append_durable(b"next").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"oknext");
    }

    #[test]
    fn failed_replace_keeps_the_current_file_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let (mut f, _) = AppendFile::open(&path).unwrap();
        f.append_durable(b"one").unwrap();
        f.faults().disk_full_after(1);
        assert!(f.replace(b"compacted").is_err());
        assert!(!path.with_extension("rewrite").exists());
        f.faults().disk_freed();
        f.append_durable(b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"onetwo");
        f.replace(b"new").unwrap();
        f.append_durable(b"+").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new+");
    }
}
