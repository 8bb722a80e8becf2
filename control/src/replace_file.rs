//! Whole-file replacement that survives a crash and a full disk: the metadata, ACL and quota
//! stores each keep one small JSON file and rewrite it on every change.
//!
//! The new content goes to `<file>.tmp`, is fsynced, renamed over the file, and the directory
//! is fsynced (the rename is durable only once the directory entry is). A failure leaves the
//! old file as it was and removes the partial temp file, which would only hold on to the space
//! that is short. Files are created owner-only (0600): the metadata log's hard state and
//! snapshot hold the mirrors' settings, source credentials included.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Replaces `path` with `bytes`, durably; on error the old content is untouched.
pub fn replace_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(dir) = path.parent() {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
