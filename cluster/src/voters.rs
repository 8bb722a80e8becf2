//! The quorum string: Kafka's `controller.quorum.voters` format, `ID@HOST:PORT,...`.

use std::collections::BTreeSet;
use std::fmt;

/// One voter of the metadata quorum and its controller address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: u64,
    /// `HOST:PORT`, resolved when connecting (hosts may be names).
    pub addr: String,
}

impl fmt::Display for Voter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.id, self.addr)
    }
}

/// A malformed quorum string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quorum '{input}': {reason}")]
pub struct QuorumParseError {
    pub input: String,
    pub reason: String,
}

/// Parses `1@host:9093,2@host:9095,...`: ids are positive and unique, addresses are
/// `HOST:PORT` (IPv6 as `[::1]:9093`) and unique.
pub fn parse_quorum(input: &str) -> Result<Vec<Voter>, QuorumParseError> {
    let err = |reason: String| QuorumParseError {
        input: input.to_string(),
        reason,
    };
    let mut voters = Vec::new();
    let mut ids = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    for item in input.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(err("empty voter entry".into()));
        }
        let (id, addr) = item
            .split_once('@')
            .ok_or_else(|| err(format!("'{item}' is not ID@HOST:PORT")))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| err(format!("'{id}' is not a node id")))?;
        if id == 0 {
            return Err(err("node id 0 is reserved".into()));
        }
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| err(format!("'{addr}' has no :PORT")))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.is_empty() || (host.starts_with('[') != host.ends_with(']')) {
            return Err(err(format!("'{addr}' has no valid host")));
        }
        if bare.contains(':') && !host.starts_with('[') {
            return Err(err(format!(
                "IPv6 address '{addr}' must be written [ADDR]:PORT"
            )));
        }
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(err(format!("'{port}' is not a port"))),
        }
        if !ids.insert(id) {
            return Err(err(format!("node id {id} appears twice")));
        }
        if !addrs.insert(addr.to_ascii_lowercase()) {
            return Err(err(format!("address {addr} appears twice")));
        }
        voters.push(Voter {
            id,
            addr: addr.to_string(),
        });
    }
    Ok(voters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_style_voter_lists_parse() {
        let v = parse_quorum("1@127.0.0.1:9093, 2@localhost:9095,3@[::1]:9097").unwrap();
        assert_eq!(
            v.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
            ["1@127.0.0.1:9093", "2@localhost:9095", "3@[::1]:9097"]
        );
    }

    #[test]
    fn malformed_voter_lists_are_refused_with_a_reason() {
        for (bad, why) in [
            ("", "empty"),
            ("1@a:1,", "empty"),
            ("a@h:1", "not a node id"),
            ("0@h:1", "reserved"),
            ("1h:1", "ID@HOST:PORT"),
            ("1@h", "no :PORT"),
            ("1@h:0", "not a port"),
            ("1@h:99999", "not a port"),
            ("1@:9", "no valid host"),
            ("1@::1:9", "IPv6"),
            ("1@h:1,1@g:2", "appears twice"),
            ("1@h:1,2@H:1", "appears twice"),
        ] {
            let e = parse_quorum(bad).unwrap_err();
            assert!(e.reason.contains(why), "{bad}: {e}");
        }
    }
}
