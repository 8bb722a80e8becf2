//! A clustered node's `meta.properties` in its data directory, in Kafka's format (`version=1`,
//! `node.id`, `directory.id`, `cluster.id`), so Kafka's tools read it: `kafka-metadata-quorum
//! add-controller --command-config` takes the directory id from here, as it does from a
//! Kafka controller's metadata directory.
//!
//! The directory id is made once (Kafka's `Uuid.randomUuid`: 16 random bytes in URL-safe
//! base64, never a reserved id nor one starting with '-') and never changes: it tells a
//! node's metadata directory apart from a wiped or replaced one with the same node id. The
//! cluster id is added once the quorum has named the cluster.

use std::io;
use std::path::Path;

use base64::Engine as _;

pub const FILE: &str = "meta.properties";

/// The node's identity as the file records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub node_id: u64,
    pub directory_id: String,
    pub cluster_id: Option<String>,
}

fn new_directory_id() -> String {
    loop {
        let id = uuid::Uuid::new_v4().as_u128();
        let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.to_be_bytes());
        // Kafka reserves the zero and one uuids; ids starting with '-' confuse command lines.
        if id > 1 && !text.starts_with('-') {
            return text;
        }
    }
}

fn parse(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn write(dir: &Path, m: &MetaProperties) -> io::Result<()> {
    let mut text = String::from("#kmirror metadata directory identity (Kafka meta.properties)\n");
    if let Some(c) = &m.cluster_id {
        text.push_str(&format!("cluster.id={c}\n"));
    }
    text.push_str(&format!(
        "directory.id={}\nnode.id={}\nversion=1\n",
        m.directory_id, m.node_id
    ));
    let tmp = dir.join(format!("{FILE}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Reads `dir/meta.properties`, creating it (with a new directory id) when absent. A file
/// naming another node id is refused: the directory belongs to another node.
pub fn load_or_create(dir: &Path, node_id: u64) -> io::Result<MetaProperties> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let kv = parse(&text);
            let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
            let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
            let file_node: u64 = get("node.id")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(format!("{} has no node.id", path.display())))?;
            if file_node != node_id {
                return Err(bad(format!(
                    "{} belongs to node {file_node}, not {node_id}",
                    path.display()
                )));
            }
            let mut m = MetaProperties {
                node_id,
                directory_id: get("directory.id").unwrap_or_default(),
                cluster_id: get("cluster.id"),
            };
            if m.directory_id.is_empty() {
                m.directory_id = new_directory_id();
                write(dir, &m)?;
            }
            Ok(m)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let m = MetaProperties {
                node_id,
                directory_id: new_directory_id(),
                cluster_id: None,
            };
            write(dir, &m)?;
            Ok(m)
        }
        Err(e) => Err(e),
    }
}

/// Records the cluster id once the quorum has named the cluster (no-op when recorded).
pub fn set_cluster_id(dir: &Path, m: &MetaProperties, cluster_id: &str) -> io::Result<()> {
    if cluster_id.is_empty() || m.cluster_id.as_deref() == Some(cluster_id) {
        return Ok(());
    }
    let mut m = m.clone();
    m.cluster_id = Some(cluster_id.to_string());
    write(dir, &m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_id_is_made_once_and_the_cluster_id_added_later() {
        let d = tempfile::tempdir().unwrap();
        let m = load_or_create(d.path(), 4).unwrap();
        assert_eq!(m.directory_id.len(), 22);
        assert_eq!(m.cluster_id, None);
        set_cluster_id(d.path(), &m, "abc").unwrap();
        let again = load_or_create(d.path(), 4).unwrap();
        assert_eq!(again.directory_id, m.directory_id);
        assert_eq!(again.cluster_id.as_deref(), Some("abc"));
        let text = std::fs::read_to_string(d.path().join(FILE)).unwrap();
        assert!(
            text.contains("version=1\n") && text.contains("node.id=4\n"),
            "{text}"
        );
        let e = load_or_create(d.path(), 5).unwrap_err();
        assert!(e.to_string().contains("belongs to node 4"), "{e}");
    }
}
