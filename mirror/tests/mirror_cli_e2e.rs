//! `kmirror mirror ...` end to end: the real binary talks over TCP to a small server that
//! answers ApiVersions itself and every mirror API with the real [`MirrorService`] (the
//! broker's mirror host is faked). Checks exit codes, one-line errors and the `--json` contract.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use kmirror_control::mirror::{
    HostError, MirrorCoordinator, MirrorDefinition, MirrorHost, MirrorStateStore,
};
use kmirror_mirror::{LivePartition, MirrorLiveStatus, MirrorService};
use kmirror_types::{LeaderEpoch, Offset, TopicPartition};

struct Host {
    topics: BTreeMap<String, i32>,
    epoch: i32,
}

impl MirrorHost for Host {
    fn local_partition_count(&self, topic: &str) -> Option<i32> {
        self.topics.get(topic).copied()
    }
    fn start_fetcher(&mut self, _m: &MirrorDefinition, _tp: &TopicPartition) {}
    fn stop_fetcher(&mut self, _tp: &TopicPartition) -> Result<(), HostError> {
        Ok(())
    }
    fn leader_epoch(&self, _tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
        Ok(LeaderEpoch(self.epoch))
    }
    fn bump_leader_epoch(&mut self, _tp: &TopicPartition) -> Result<LeaderEpoch, HostError> {
        self.epoch += 1;
        Ok(LeaderEpoch(self.epoch))
    }
    fn truncate_to_lso(&mut self, _tp: &TopicPartition) -> Result<Offset, HostError> {
        Ok(Offset(0))
    }
    fn ends_with_pid_reset(&self, _tp: &TopicPartition) -> Result<bool, HostError> {
        Ok(false)
    }
    fn write_pid_reset(&mut self, _tp: &TopicPartition) -> Result<(), HostError> {
        Ok(())
    }
}

impl MirrorLiveStatus for Host {
    fn live(&self, tp: &TopicPartition, _now_ms: i64) -> Option<LivePartition> {
        Some(LivePartition {
            source_offset: 100,
            destination_offset: 90 + i64::from(tp.partition),
            lag: 10 - i64::from(tp.partition),
            lag_ms: 1234,
            lost_records: 0,
            lost_from: -1,
            lost_to: -1,
        })
    }
}

fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}

fn write_frame(s: &mut TcpStream, body: &[u8]) {
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(body).unwrap();
}

fn api_versions_response(mut frame: Bytes) -> Bytes {
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let hv = if version >= 3 { 2 } else { 1 };
    let header = RequestHeader::decode(&mut frame, hv).unwrap();
    let mut keys: Vec<ApiVersion> = MirrorService::versions()
        .into_iter()
        .map(|(k, lo, hi)| {
            ApiVersion::default()
                .with_api_key(k)
                .with_min_version(lo)
                .with_max_version(hi)
        })
        .collect();
    keys.push(
        ApiVersion::default()
            .with_api_key(18)
            .with_min_version(0)
            .with_max_version(4),
    );
    let resp = ApiVersionsResponse::default().with_api_keys(keys);
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(header.correlation_id)
        .encode(&mut out, 0)
        .unwrap();
    resp.encode(&mut out, version).unwrap();
    out.freeze()
}

/// Serve forever on a loopback port; returns the address.
fn spawn_server(dir: std::path::PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let store = MirrorStateStore::open(&dir).unwrap();
        let mut svc = MirrorService::new(MirrorCoordinator::new(store), 1);
        let mut host = Host {
            topics: BTreeMap::from([("orders".to_owned(), 2)]),
            epoch: 4,
        };
        for conn in listener.incoming() {
            let mut s = conn.unwrap();
            while let Some(frame) = read_frame(&mut s) {
                let key = i16::from_be_bytes([frame[0], frame[1]]);
                let resp = if key == 18 {
                    api_versions_response(frame)
                } else {
                    svc.handle_frame(frame, &mut host, 0)
                        .expect("only mirror APIs are sent")
                };
                // Stand-in for the metadata sync loop: named topics whose local copy has the
                // source's id (always, here) get their partitions materialized.
                let wanted: Vec<(String, String)> = svc
                    .coordinator()
                    .mirrors()
                    .flat_map(|m| m.topics.iter().map(|t| (m.name.clone(), t.clone())))
                    .collect();
                for (m, t) in wanted {
                    for p in 0..host.local_partition_count(&t).unwrap_or(0) {
                        let tp = TopicPartition::new(t.clone(), p);
                        if svc.coordinator().store().state_of(&tp)
                            == kmirror_control::mirror::PartitionState::Unknown
                        {
                            svc.coordinator_mut()
                                .materialize_partition(&m, &tp)
                                .unwrap();
                        }
                    }
                }
                write_frame(&mut s, &resp);
            }
        }
    });
    addr
}

fn kmirror(addr: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(kmirror_tests::deps::kmirror_bin())
        .arg("mirror")
        .arg("--bootstrap")
        .arg(addr)
        .args(args)
        .output()
        .expect("run kmirror");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn mirror_cli_drives_the_mirror_apis_with_stable_json_and_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let addr = spawn_server(dir.path().to_path_buf());

    let (ok, out, err) = kmirror(
        &addr,
        &[
            "create",
            "dr",
            "--source",
            "127.0.0.1:9",
            "--set",
            "mirror.metadata.sync.interval.ms=5000",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("Created mirror 'dr'"), "{out}");

    let (ok, _, err) = kmirror(&addr, &["create", "dr", "--source", "127.0.0.1:9"]);
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    assert!(err.contains("MIRROR_ALREADY_EXISTS"), "{err}");

    // Upstream's name for AddTopicsToMirror is accepted too.
    let (ok, out, err) = kmirror(&addr, &["start", "dr", "--topics", "orders"]);
    assert!(ok, "{err}");
    assert!(out.contains("orders"), "{out}");

    let (ok, out, _) = kmirror(&addr, &["list", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v[0]["mirror"], "dr");
    assert_eq!(v[0]["source_bootstrap"], "127.0.0.1:9");
    assert_eq!(v[0]["topic_count"], 1);

    let (ok, out, err) = kmirror(&addr, &["describe", "dr", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2, "one object per partition");
    for (p, row) in rows.iter().enumerate() {
        assert_eq!(row["mirror"], "dr");
        assert_eq!(row["topic"], "orders");
        assert_eq!(row["partition"], p);
        assert_eq!(row["state"], "PREPARING");
        assert_eq!(row["source_offset"], 100);
        assert_eq!(row["destination_offset"], 90 + p);
        assert_eq!(row["lag"], 10 - p);
        assert_eq!(row["lag_ms"], 1234);
    }

    let (ok, out, _) = kmirror(
        &addr,
        &["describe", "--watch", "--count", "2", "--interval-ms", "10"],
    );
    assert!(ok);
    assert_eq!(out.matches("MIRROR").count(), 2, "two refreshes: {out}");

    // Pause is refused while PREPARING (only MIRRORING can pause).
    let (ok, _, err) = kmirror(&addr, &["pause", "dr", "--topics", "orders"]);
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let (ok, _, err) = kmirror(&addr, &["delete", "dr"]);
    assert!(!ok);
    assert!(err.contains("MIRROR_NOT_EMPTY"), "{err}");

    // Failover under upstream's name, then the mirror can go.
    let (ok, out, err) = kmirror(&addr, &["stop", "dr", "--topics", "orders"]);
    assert!(ok, "{err}");
    assert!(out.contains("orders"), "{out}");
    let (ok, out, _) = kmirror(&addr, &["describe", "dr", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["state"] == "STOPPED"));
    assert_eq!(v[0]["last_mirrored_epoch"], 4);
    let (ok, _, err) = kmirror(&addr, &["delete", "dr"]);
    assert!(ok, "{err}");

    let (ok, _, err) = kmirror(&addr, &["describe", "dr"]);
    assert!(!ok);
    assert!(err.contains("UNKNOWN_MIRROR"), "{err}");
}
