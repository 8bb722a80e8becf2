//! Issue 11, step 5: fetch sessions (KIP-227) served to clients. The same walk through a
//! session — open, incremental fetches with and without news, a replayed epoch, an unknown
//! session, forgetting a partition, closing — over the wire against kmirror and against
//! Apache Kafka 4.1.1; what a client sees (errors, which partitions come back, their records)
//! must be the same. (The Java consumer opens sessions by default, so `real_clients`' group
//! scenarios read through them end to end.)

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_tests::helpers::now_ms;
use kmirror_tests::{records, KafkaCluster, KmirrorNode, WireClient};

const TOPIC: &str = "sessions";

/// (top-level error, session id, [(partition, error, record values)]) of one Fetch.
type Seen = (i16, i32, Vec<(i32, i16, Vec<String>)>);

struct Walk {
    c: WireClient,
    topic_id: uuid::Uuid,
    version: i16,
}

impl Walk {
    fn request(
        &self,
        session: i32,
        epoch: i32,
        parts: &[(i32, i64)],
        forget: &[i32],
    ) -> FetchRequest {
        let name = TopicName(StrBytes::from_static_str(TOPIC));
        let mut req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_session_id(session)
            .with_session_epoch(epoch);
        if !parts.is_empty() {
            req.topics = vec![FetchTopic::default()
                .with_topic(name.clone())
                .with_topic_id(self.topic_id)
                .with_partitions(
                    parts
                        .iter()
                        .map(|(p, off)| {
                            FetchPartition::default()
                                .with_partition(*p)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(*off)
                                .with_partition_max_bytes(1 << 20)
                        })
                        .collect(),
                )];
        }
        if !forget.is_empty() {
            req.forgotten_topics_data = vec![ForgottenTopic::default()
                .with_topic(name)
                .with_topic_id(self.topic_id)
                .with_partitions(forget.to_vec())];
        }
        req
    }

    /// What the client saw of one Fetch.
    fn fetch(&mut self, session: i32, epoch: i32, parts: &[(i32, i64)], forget: &[i32]) -> Seen {
        let req = self.request(session, epoch, parts, forget);
        let resp = self.c.send_at(req, self.version).expect("Fetch");
        let mut seen: Vec<(i32, i16, Vec<String>)> = resp
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| {
                let values = p
                    .records
                    .as_ref()
                    .map(|r| {
                        records::decode_values(r)
                            .expect("records decode")
                            .into_iter()
                            .map(|(_, v)| {
                                String::from_utf8_lossy(&v.unwrap_or_default()).into_owned()
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (p.partition_index, p.error_code, values)
            })
            .collect();
        seen.sort();
        (resp.error_code, resp.session_id, seen)
    }
}

/// The walk; returns one line per step of what the client saw (session ids as given/none).
fn walk(bootstrap: &str) -> Vec<String> {
    let mut admin = WireClient::connect(bootstrap).expect("connect");
    assert_eq!(admin.create_topic(TOPIC, 3, 1, &[]).expect("create"), 0);
    for p in 0..3 {
        let vals = [format!("p{p}-a"), format!("p{p}-b")];
        let vals: Vec<&[u8]> = vals.iter().map(|v| v.as_bytes()).collect();
        let (err, _) = admin
            .produce_raw(TOPIC, p, records::batch(&vals, now_ms()), -1)
            .expect("produce");
        assert_eq!(err, 0);
    }
    let info = admin.partition_info(TOPIC, 0).expect("metadata");
    let c = WireClient::connect_leader(bootstrap, TOPIC, 0).expect("connect");
    let version = c.version_range(1).expect("Fetch served").1.min(16);
    let mut w = Walk {
        c,
        topic_id: info.topic_id,
        version,
    };
    let mut out = Vec::new();
    let mut note = |step: &str, (err, sid, parts): Seen| {
        let line = format!(
            "{step}: error {err}, session {}, partitions {parts:?}",
            if sid == 0 { "none" } else { "given" }
        );
        println!("{line}");
        out.push(line);
        sid
    };
    // Open: a full fetch of all three from offset 0.
    let open = w.fetch(0, 0, &[(0, 0), (1, 0), (2, 0)], &[]);
    let id = note("open", open);
    assert_ne!(id, 0, "the broker gives a session");
    // Epoch 1: the client moved past what it read on 0 and 1; nothing new anywhere.
    let r = w.fetch(id, 1, &[(0, 2), (1, 2)], &[]);
    note("incremental, no news", r);
    // New records on partition 1 only.
    let (err, _) = admin
        .produce_raw(TOPIC, 1, records::batch(&[b"p1-c"], now_ms()), -1)
        .expect("produce");
    assert_eq!(err, 0);
    let r = w.fetch(id, 2, &[], &[]);
    note("incremental after a produce to 1", r);
    // The same epoch again, and an unknown session.
    let r = w.fetch(id, 2, &[], &[]);
    note("replayed epoch", r);
    let r = w.fetch(id.wrapping_add(7 << 8), 1, &[], &[]);
    note("unknown session", r);
    // The session survives a refused request: forget 2, then news on 2 is not sent.
    let r = w.fetch(id, 3, &[(1, 3)], &[2]);
    note("forget 2", r);
    let (err, _) = admin
        .produce_raw(TOPIC, 2, records::batch(&[b"p2-c"], now_ms()), -1)
        .expect("produce");
    assert_eq!(err, 0);
    let r = w.fetch(id, 4, &[], &[]);
    note("news on a forgotten partition", r);
    // Close: a sessionless full fetch.
    let r = w.fetch(id, -1, &[(2, 2)], &[]);
    note("close", r);
    let r = w.fetch(id, 5, &[], &[]);
    note("closed session", r);
    out
}

#[test]
fn a_fetch_session_walk_sees_the_same_answers_as_on_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let want = {
        let kafka = KafkaCluster::single();
        walk(&kafka.bootstrap())
    };
    let node = KmirrorNode::start();
    let got = walk(&node.addr());
    assert_eq!(got, want);
}

/// A long-polling incremental Fetch whose session is closed from another connection while it
/// waits (one core, so both connections share the session cache) is answered with a session
/// error the client recovers from, and the broker keeps serving. (This once panicked the
/// core: the session was looked up again after the wait.)
#[test]
fn a_session_closed_while_a_fetch_waits_gets_a_session_error_not_a_dead_core() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let node = KmirrorNode::builder().args(&["--cores", "1"]).start();
    let boot = node.addr();
    let mut admin = WireClient::connect(&boot).expect("connect");
    assert_eq!(admin.create_topic(TOPIC, 1, 1, &[]).expect("create"), 0);
    let info = admin.partition_info(TOPIC, 0).expect("metadata");
    let open_walk = |c: WireClient| {
        let version = c.version_range(1).expect("Fetch served").1.min(16);
        Walk {
            c,
            topic_id: info.topic_id,
            version,
        }
    };
    let mut a = open_walk(WireClient::connect(&boot).expect("connect"));
    let (err, id, _) = a.fetch(0, 0, &[(0, 0)], &[]);
    assert_eq!(err, 0);
    assert_ne!(id, 0);
    let waiter = std::thread::spawn(move || {
        // Nothing to read: this waits up to 3 s for data.
        let mut req = a.request(id, 1, &[], &[]);
        req.max_wait_ms = 3000;
        req.min_bytes = 1;
        let v = a.version;
        a.c.send_at(req, v).expect("the waiting Fetch is answered")
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut b = open_walk(WireClient::connect(&boot).expect("connect"));
    let (err, _, _) = b.fetch(id, -1, &[(0, 0)], &[]);
    assert_eq!(err, 0, "closing the session is a normal full fetch");
    let resp = waiter.join().expect("waiter thread");
    println!("waiting fetch answered: error {}", resp.error_code);
    assert_eq!(resp.error_code, 70, "FETCH_SESSION_ID_NOT_FOUND");
    // The core still serves.
    let (err, id2, _) = b.fetch(0, 0, &[(0, 0)], &[]);
    assert_eq!(err, 0);
    assert_ne!(id2, 0);
    assert!(admin.metadata(None).is_ok());
}

/// The request-wide `max_bytes` (fetch.max.bytes) bounds the response even when one
/// partition's own limit is larger, as on Kafka: librdkafka's suite (0082) drops a response
/// larger than it asked for. A first batch larger than the limit still comes whole.
#[test]
fn the_response_limit_caps_a_partition_with_a_larger_limit_like_kafka() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let sizes = |bootstrap: &str| -> Vec<usize> {
        let mut admin = WireClient::connect(bootstrap).expect("connect");
        assert_eq!(admin.create_topic("limits", 1, 1, &[]).expect("create"), 0);
        let value = vec![b'x'; 10_000];
        for _ in 0..4 {
            // Kafka answers CreateTopics before the partition has a leader: retry the
            // retriable answers (3, 6) for a while.
            let mut tries = 0;
            loop {
                let (err, _) = admin
                    .produce_raw("limits", 0, records::batch(&[&value], now_ms()), -1)
                    .expect("produce");
                if err == 0 {
                    break;
                }
                tries += 1;
                assert!((err == 3 || err == 6) && tries < 100, "produce error {err}");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        let mut c = WireClient::connect_leader(bootstrap, "limits", 0).expect("connect");
        let mut out = Vec::new();
        for response_max in [25_000, 5_000, 1 << 20] {
            let v = c.version_range(1).expect("Fetch").1.min(16);
            let topic_id = c.partition_info("limits", 0).expect("metadata").topic_id;
            let req = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_min_bytes(0)
                .with_max_bytes(response_max)
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("limits")))
                    .with_topic_id(topic_id)
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(20 << 20)])]);
            let resp = c.send_at(req, v).expect("Fetch");
            let n = resp.responses[0].partitions[0]
                .records
                .as_ref()
                .map(|r| records::split_batches(r).len())
                .unwrap_or(0);
            out.push(n);
        }
        out
    };
    let want = {
        let kafka = KafkaCluster::single();
        sizes(&kafka.bootstrap())
    };
    let node = KmirrorNode::start();
    let got = sizes(&node.addr());
    println!("batches per response (25 kB, 5 kB, 1 MiB limits): kafka {want:?}, kmirror {got:?}");
    assert_eq!(got, want);
}

/// Record bytes go out by sendfile(2) to network peers and by copy to loopback ones (which is
/// faster there: docs/BENCHMARKS.md); both paths must serve the same bytes. Every test
/// connects over loopback, so this one forces each path (`KMIRROR_SENDFILE=1` / `=0`) and
/// reads batches large enough to be sent on their own (not copied into the frame), across a
/// response that spans several of them and ends in a partial one.
#[test]
fn sendfile_and_copying_serve_identical_record_bytes() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let values: Vec<Vec<u8>> = (0..24u8)
        .map(|i| {
            (0..70_000u32)
                .map(|j| i.wrapping_mul(31).wrapping_add(j as u8))
                .collect()
        })
        .collect();
    let serve = |forced: &str| -> (Bytes, Vec<(i64, Option<Bytes>)>) {
        let node = KmirrorNode::builder()
            .env(&[("KMIRROR_SENDFILE", forced)])
            .start();
        let mut admin = WireClient::connect(&node.addr()).expect("connect");
        assert_eq!(admin.create_topic("big", 1, 1, &[]).expect("create"), 0);
        for v in &values {
            let (err, _) = admin
                .produce_raw("big", 0, records::batch(&[v.as_slice()], now_ms()), -1)
                .expect("produce");
            assert_eq!(err, 0);
        }
        let mut c = WireClient::connect_leader(&node.addr(), "big", 0).expect("connect");
        let v = c.version_range(1).expect("Fetch").1.min(16);
        let topic_id = c.partition_info("big", 0).expect("metadata").topic_id;
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(50 << 20)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("big")))
                .with_topic_id(topic_id)
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(3)
                    .with_partition_max_bytes(1_000_000)])]);
        let resp = c.send_at(req, v).expect("Fetch");
        let bytes = resp.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        let decoded = records::decode_values(&bytes).expect("decode");
        (bytes, decoded)
    };
    let (sent, sent_records) = serve("1");
    let (copied, copied_records) = serve("0");
    println!(
        "sendfile: {} bytes, {} records; copy: {} bytes, {} records",
        sent.len(),
        sent_records.len(),
        copied.len(),
        copied_records.len()
    );
    // The 1 MB partition limit holds 14 whole batches of 70 kB from offset 3.
    assert_eq!(
        sent_records.len(),
        14,
        "whole batches within the 1 MB limit"
    );
    for (i, (offset, value)) in sent_records.iter().enumerate() {
        assert_eq!(*offset, 3 + i as i64);
        assert_eq!(
            value.as_deref(),
            Some(values[3 + i].as_slice()),
            "offset {offset}"
        );
    }
    for b in records::split_batches(&sent) {
        assert!(b.crc_ok(), "batch at {} has a bad CRC", b.base_offset);
    }
    // The two nodes hold different batches (their own timestamps), so compare what a
    // consumer reads, and the sizes.
    assert_eq!(sent_records, copied_records);
    assert_eq!(sent.len(), copied.len());
}
