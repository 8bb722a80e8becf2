//! `kmirror serve` settings: a TOML file (every key optional, see `kmirror.toml`) overridden
//! by command-line flags.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The `serve` configuration. Field names are the TOML keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ServeConfig {
    /// HOST:PORT to listen on; the host is advertised to clients.
    pub listen: String,
    /// Where logs and metadata live.
    pub data_dir: PathBuf,
    pub node_id: i32,
    /// Executor threads, one per core; 0 = all online CPUs.
    pub cores: usize,
    /// Pin each executor to its own CPU.
    pub pin_cores: bool,
    /// "spread" or "hash": how partitions are assigned to cores.
    pub partition_assignment: String,
    /// Prometheus metrics endpoint (HOST:PORT); empty = off.
    pub metrics: String,
    /// `socket.request.max.bytes`: larger requests close the connection unread.
    pub socket_request_max_bytes: usize,
    /// Create unknown topics on Metadata requests (Kafka's auto.create.topics.enable).
    pub auto_create_topics: bool,
    /// Partitions of auto-created topics and of CreateTopics without a count.
    pub num_partitions: i32,
    /// Seconds between retention passes over each core's partitions.
    pub retention_check_secs: u64,
    /// Log filter (RUST_LOG syntax) when RUST_LOG is unset.
    pub log_level: String,
    /// `mirror.version` feature level: 0 turns the mirror APIs off (UNSUPPORTED_VERSION).
    pub mirror_version: i16,
    /// Ceiling on mirror fetch traffic for the whole broker, bytes/s (0 = unlimited).
    pub mirror_byte_rate: u64,
    /// Enforce ACLs (Kafka's StandardAuthorizer semantics); false allows every request.
    pub authorizer: bool,
    /// Principals that bypass ACLs, semicolon-separated (`User:admin;User:ops`).
    pub super_users: String,
    /// Allow a request on a resource no ACL mentions (Kafka's allow.everyone.if.no.acl.found).
    pub allow_everyone_if_no_acl_found: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "127.0.0.1:9092".into(),
            data_dir: PathBuf::from("./kmirror-data"),
            node_id: 1,
            cores: 0,
            pin_cores: true,
            partition_assignment: "spread".into(),
            metrics: String::new(),
            socket_request_max_bytes: 100 << 20,
            auto_create_topics: true,
            num_partitions: 1,
            retention_check_secs: 30,
            log_level: "info".into(),
            mirror_version: 1,
            mirror_byte_rate: 0,
            authorizer: false,
            super_users: String::new(),
            allow_everyone_if_no_acl_found: false,
        }
    }
}

/// Errors reading the config.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl ServeConfig {
    pub(crate) fn load(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if kmirror_engine::Assignment::parse(&self.partition_assignment).is_none() {
            return Err(ConfigError::Invalid(format!(
                "partition_assignment must be \"spread\" or \"hash\", got \"{}\"",
                self.partition_assignment
            )));
        }
        if self.num_partitions < 1 {
            return Err(ConfigError::Invalid(
                "num_partitions must be at least 1".into(),
            ));
        }
        if self.socket_request_max_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "socket_request_max_bytes must be at least 1024".into(),
            ));
        }
        if !(0..=1).contains(&self.mirror_version) {
            return Err(ConfigError::Invalid(format!(
                "mirror_version must be 0 or 1, got {}",
                self.mirror_version
            )));
        }
        self.authz()?;
        Ok(())
    }

    /// The authorizer settings.
    pub(crate) fn authz(&self) -> Result<kmirror_control::authz::AuthzConfig, ConfigError> {
        use kmirror_control::authz::AuthzConfig;
        Ok(AuthzConfig {
            enabled: self.authorizer,
            super_users: AuthzConfig::parse_super_users(&self.super_users)
                .map_err(|e| ConfigError::Invalid(format!("super_users: {e}")))?,
            allow_everyone_if_no_acl_found: self.allow_everyone_if_no_acl_found,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_config_parses_and_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("kmirror.toml");
        let c = ServeConfig::load(&path).unwrap();
        c.validate().unwrap();
        let d = ServeConfig::default();
        assert_eq!(c.listen, d.listen);
        assert_eq!(c.socket_request_max_bytes, d.socket_request_max_bytes);
        assert_eq!(c.partition_assignment, d.partition_assignment);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_reported() {
        assert!(toml::from_str::<ServeConfig>("lissen = \"x\"").is_err());
        let c: ServeConfig = toml::from_str("partition_assignment = \"random\"").unwrap();
        assert!(c.validate().is_err());
        let c: ServeConfig = toml::from_str("authorizer = true\nsuper_users = \"admin\"").unwrap();
        assert!(c.validate().is_err());
        let c: ServeConfig =
            toml::from_str("authorizer = true\nsuper_users = \"User:admin;User:ops\"").unwrap();
        assert_eq!(c.authz().unwrap().super_users, ["User:admin", "User:ops"]);
    }
}
