//! Atomic small-file writes and the partition checkpoint (recovery point, HW, log start).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

pub(crate) const CHECKPOINT_FILE: &str = "log.checkpoint";

/// Writes `name` in `dir` so that a crash leaves either the old or the new contents:
/// write a temp file, fsync it, rename over the target, fsync the directory.
pub(crate) fn write_atomic(dir: &Path, name: &str, contents: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let res = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(contents).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, dir.join(name)));
    if let Err(e) = res {
        // ENOSPC: don't leave a partial temp file holding space (the old file is intact).
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub(crate) recovery_point: i64,
    pub(crate) high_watermark: i64,
    pub(crate) log_start: i64,
}

impl Checkpoint {
    pub(crate) fn write(&self, dir: &Path) -> io::Result<()> {
        let s = format!(
            "kmirror-log-checkpoint 1\nrecovery_point {}\nhigh_watermark {}\nlog_start {}\n",
            self.recovery_point, self.high_watermark, self.log_start
        );
        write_atomic(dir, CHECKPOINT_FILE, s.as_bytes())
    }

    /// Ok(None) when missing or unreadable (the log then recovers everything).
    pub(crate) fn read(dir: &Path) -> io::Result<Option<Checkpoint>> {
        let text = match fs::read(dir.join(CHECKPOINT_FILE)) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let Ok(text) = String::from_utf8(text) else {
            return Ok(None);
        };
        let mut lines = text.lines();
        if lines.next() != Some("kmirror-log-checkpoint 1") {
            return Ok(None);
        }
        let mut field = |name: &str| -> Option<i64> {
            let l = lines.next()?;
            let v = l.strip_prefix(name)?.strip_prefix(' ')?;
            v.parse().ok()
        };
        let (Some(recovery_point), Some(high_watermark), Some(log_start)) = (
            field("recovery_point"),
            field("high_watermark"),
            field("log_start"),
        ) else {
            return Ok(None);
        };
        Ok(Some(Checkpoint {
            recovery_point,
            high_watermark,
            log_start,
        }))
    }
}
