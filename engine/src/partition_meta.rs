//! A partition directory's `partition.metadata` file (Kafka's format: `version: 0` and
//! `topic_id: <base64url uuid>`): which topic incarnation the log belongs to.
//!
//! Owns: reading, checking and writing that file when a partition opens. A directory whose
//! file names another topic id holds the log of a deleted topic of the same name (a node was
//! down while the topic was deleted and re-created): it is a stray log and is removed before
//! the new topic's log opens there, as Kafka does. A directory without the file is adopted.
//! Must not depend on cluster metadata: the caller passes the published topic id.

use std::io::Write;
use std::path::Path;

use base64::Engine as _;

pub(crate) const FILE: &str = "partition.metadata";

/// Kafka's textual topic id (URL-safe base64 of the 16 big-endian bytes, no padding).
pub(crate) fn topic_id_string(id: u128) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.to_be_bytes())
}

fn parse_topic_id(s: &str) -> Option<u128> {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim())
        .ok()?;
    Some(u128::from_be_bytes(b.try_into().ok()?))
}

/// The topic id recorded in `dir` (None: no file, or one this version cannot read).
pub(crate) fn read(dir: &Path) -> std::io::Result<Option<u128>> {
    let text = match std::fs::read_to_string(dir.join(FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("topic_id:"))
        .and_then(parse_topic_id))
}

/// Writes the file (temp file, fsync, rename: a crash leaves the old one or the new one).
pub(crate) fn write(dir: &Path, topic_id: u128) -> std::io::Result<()> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    write!(f, "version: 0\ntopic_id: {}\n", topic_id_string(topic_id))?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(FILE))
}

/// Before opening `dir` for topic `topic_id`: removes it if it belongs to another topic id.
/// Returns whether it was removed.
pub(crate) fn remove_if_stray(dir: &Path, topic_id: u128) -> std::io::Result<bool> {
    match read(dir)? {
        Some(found) if found != topic_id => {
            tracing::warn!(
                dir = %dir.display(),
                found = %topic_id_string(found),
                topic_id = %topic_id_string(topic_id),
                "stray log of a deleted topic with the same name: removing it"
            );
            std::fs::remove_dir_all(dir)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// After opening: records `topic_id` unless the file already says so.
pub(crate) fn ensure(dir: &Path, topic_id: u128) -> std::io::Result<()> {
    if read(dir)? == Some(topic_id) {
        return Ok(());
    }
    write(dir, topic_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_another_topic_id_is_removed_and_the_file_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("t-0");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("00000000000000000000.log"), b"old").unwrap();
        // No file: adopted.
        assert!(!remove_if_stray(&dir, 7).unwrap());
        ensure(&dir, 7).unwrap();
        assert_eq!(read(&dir).unwrap(), Some(7));
        let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        assert!(text.starts_with("version: 0\ntopic_id: "), "{text}");
        // Same id: kept.
        assert!(!remove_if_stray(&dir, 7).unwrap());
        assert!(dir.join("00000000000000000000.log").exists());
        // Another id: removed.
        assert!(remove_if_stray(&dir, 8).unwrap());
        assert!(!dir.exists());
    }

    #[test]
    fn topic_ids_print_as_kafka_does() {
        // Kafka's Uuid.toString: 22 URL-safe base64 characters.
        let s = topic_id_string(u128::MAX - 5);
        assert_eq!(s.len(), 22);
        assert_eq!(parse_topic_id(&s), Some(u128::MAX - 5));
    }
}
