//! Issue 12, step 4: an Apache Kafka 4.1.1 source mirrored into three `kmirror serve --quorum`
//! nodes, mirror topics RF=3 (`--default-replication-factor 3`).
//! - catch-up of 200,000 records (throttled so it takes a while); the node leading most mirror
//!   partitions is SIGKILLed mid-catch-up: the mirror catches up on the new leaders;
//! - DescribeMirrors (`kmirror mirror describe --json`) answered identically by every node;
//! - failover (`kmirror mirror remove`) through another node just after the seat (quorum
//!   leader) is SIGKILLed: the CLI waits on COORDINATOR_NOT_AVAILABLE and succeeds; the
//!   failover stores each partition's last mirrored offset (ReadMirrorStates), and
//!   WriteMirrorStates RemovedTopics drops the stopped topic's states; then a Java idempotent
//!   producer writes at the new epoch;
//! - after a clean stop, every replica's segment files start with the source's batches,
//!   byte for byte (log-equal), and all three replicas of a partition are byte-equal;
//! - ReadMirrorStates (100) and BumpLeaderEpochs (105) sent as raw frames through every node.
//!
//! `describe_mirrors_lag_is_measured_to_the_leaders_high_watermark`: with a follower frozen
//! (SIGSTOP) in the ISR, DescribeMirrors reports the leader's high watermark and the lag to
//! it, through every live node.
//!
//! `only_leaders_fetch_and_followers_replicate_the_mirror`: only partition leaders fetch,
//! the followers replicate the mirror log-equal with the source; after another node's
//! controlled shutdown moves leaderships, the gaining node mirrors from its log end; and no
//! replica of any partition diverges from the others or from the source.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kmirror_tests::cluster::{describe_topic, run_seq_producer, ClusterOpts, KmirrorCluster};
use kmirror_tests::deps;
use kmirror_tests::java;
use kmirror_tests::kafka::KafkaCluster;
use kmirror_tests::mirror::{cli_ok as cli, end_offsets};
use kmirror_tests::oracle::{log_equal, read_batches};
use kmirror_tests::proc;
use kmirror_tests::wire::WireClient;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 6;
const RECORDS: u64 = 200_000;
/// Bytes/s per fetching node (all three fetch the partitions they lead): 200,000 records
/// take some seconds, so the kill lands mid-way.
const THROTTLE: u64 = 300_000;

/// DescribeMirrors rows through `dst`, sorted: (partition, state, source, destination, lag).
/// Empty while the node answers with an error (e.g. UNKNOWN_MIRROR before the first sync
/// round created the topic); callers wait for the rows they expect.
fn describe_mirror(dst: &str) -> Vec<(i64, String, i64, i64, i64)> {
    let ran = proc::run(
        std::process::Command::new(deps::kmirror_bin())
            .args(["mirror", "--bootstrap", dst])
            .args(["describe", "dr", "--json"]),
        Duration::from_secs(60),
    );
    if !ran.status.success() {
        eprintln!("describe via {dst}: {}", ran.stderr.trim());
        return Vec::new();
    }
    let v: serde_json::Value = serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "describe --json via {dst} is not JSON ({e}): {}",
            ran.stdout
        )
    });
    let mut rows: Vec<_> = v
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            (
                r["partition"].as_i64().unwrap_or(-1),
                r["state"].as_str().unwrap_or("").to_owned(),
                r["source_offset"].as_i64().unwrap_or(-1),
                r["destination_offset"].as_i64().unwrap_or(-1),
                r["lag"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// Request header v2 (flexible) for `key` v0, client id "it".
fn header_v2(key: i16, correlation: i32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&key.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&correlation.to_be_bytes());
    b.extend_from_slice(&2i16.to_be_bytes());
    b.extend_from_slice(b"it");
    b.push(0);
    b
}

/// Compact string (length + 1 as one varint byte: short strings only).
fn compact_str(b: &mut Vec<u8>, s: &str) {
    b.push(u8::try_from(s.len() + 1).unwrap());
    b.extend_from_slice(s.as_bytes());
}

/// A flexible response frame: a cursor past the v1 header, for `corr`.
struct Cursor(Bytes, usize);

impl Cursor {
    fn new(frame: Bytes, corr: i32) -> Cursor {
        assert_eq!(i32::from_be_bytes(frame[..4].try_into().unwrap()), corr);
        assert_eq!(frame[4], 0, "response header tags");
        Cursor(frame, 5)
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let s = &self.0[self.1..self.1 + n];
        self.1 += n;
        s
    }
    fn i8(&mut self) -> i8 {
        self.take(1)[0] as i8
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    fn uvarint(&mut self) -> usize {
        let (mut v, mut shift) = (0usize, 0);
        loop {
            let b = self.take(1)[0];
            v |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }
    fn string(&mut self) -> Option<String> {
        let n = self.uvarint();
        (n > 0).then(|| String::from_utf8(self.take(n - 1).to_vec()).unwrap())
    }
    fn no_tags(&mut self) {
        assert_eq!(self.uvarint(), 0, "tagged fields");
    }
}

/// ReadMirrorStates (key 100) for every partition of mirror `dr`, sent raw through `addr`:
/// (top-level error, [(topic, partition, state code, last mirrored offset, error)]).
type MirrorStateRow = (String, i32, i8, i64, i16);
fn read_mirror_states(addr: &str) -> (i16, Vec<MirrorStateRow>) {
    let mut w = WireClient::connect(addr).expect("connect");
    let mut req = header_v2(100, 7);
    compact_str(&mut req, "dr");
    req.push(1); // no topics: all of the mirror's partitions
    req.push(1); // NeedPartitionStates
    req.push(0);
    w.write_frame(&req).unwrap();
    let mut c = Cursor::new(w.read_frame().unwrap(), 7);
    let _throttle = c.i32();
    let error = c.i16();
    let _message = c.string();
    let mut out = Vec::new();
    for _ in 0..c.uvarint().saturating_sub(1) {
        let topic = c.string().unwrap();
        for _ in 0..c.uvarint().saturating_sub(1) {
            let p = c.i32();
            let offset = c.i64();
            let state = c.i8();
            let err = c.i16();
            c.no_tags();
            out.push((topic.clone(), p, state, offset, err));
        }
        c.no_tags();
    }
    c.no_tags();
    out.sort();
    (error, out)
}

/// WriteMirrorStates (key 101) of one partition of `topic` in mirror `mirror`, sent raw
/// through `addr`: (top-level error, the partition's error).
fn write_mirror_state(
    addr: &str,
    mirror: &str,
    topic: &str,
    partition: i32,
    state: i8,
    offset: i64,
) -> (i16, i16) {
    let mut w = WireClient::connect(addr).expect("connect");
    let mut req = header_v2(101, 8);
    compact_str(&mut req, mirror);
    req.push(2);
    compact_str(&mut req, topic);
    req.push(2);
    req.extend_from_slice(&partition.to_be_bytes());
    req.extend_from_slice(&offset.to_be_bytes());
    req.push(state as u8);
    req.extend_from_slice(&[0, 0]); // partition, topic tags
    req.push(1); // no removed topics
    req.push(0);
    write_mirror_states_frame(&mut w, &req)
}

/// WriteMirrorStates (key 101) of mirror `dr` with only RemovedTopics = [`topic`], sent raw
/// through `addr`: (top-level error, the topic's error on partition -1).
fn remove_mirror_states(addr: &str, topic: &str) -> (i16, i16) {
    let mut w = WireClient::connect(addr).expect("connect");
    let mut req = header_v2(101, 8);
    compact_str(&mut req, "dr");
    req.push(1); // no topics updated
    req.push(2);
    compact_str(&mut req, topic);
    req.push(0);
    write_mirror_states_frame(&mut w, &req)
}

fn write_mirror_states_frame(w: &mut WireClient, req: &[u8]) -> (i16, i16) {
    w.write_frame(req).unwrap();
    let mut c = Cursor::new(w.read_frame().unwrap(), 8);
    let _throttle = c.i32();
    let error = c.i16();
    let _message = c.string();
    let mut part = None;
    for _ in 0..c.uvarint().saturating_sub(1) {
        let _name = c.string();
        for _ in 0..c.uvarint().saturating_sub(1) {
            let _p = c.i32();
            part = Some(c.i16());
            c.no_tags();
        }
        c.no_tags();
    }
    c.no_tags();
    (error, part.unwrap_or(-1))
}

/// BumpLeaderEpochs (key 105) for one partition, sent raw through `addr`: the partition's
/// error code.
fn bump_leader_epochs(addr: &str, topic_id: uuid::Uuid, partition: i32, at_least: i32) -> i16 {
    let mut w = WireClient::connect(addr).expect("connect");
    let mut req = header_v2(105, 9);
    req.push(2);
    req.extend_from_slice(topic_id.as_bytes());
    req.push(2);
    req.extend_from_slice(&partition.to_be_bytes());
    req.extend_from_slice(&at_least.to_be_bytes());
    req.extend_from_slice(&[0, 0, 0]);
    w.write_frame(&req).unwrap();
    let mut c = Cursor::new(w.read_frame().unwrap(), 9);
    let _throttle = c.i32();
    assert_eq!(c.i16(), 0, "BumpLeaderEpochs top-level error");
    assert_eq!(c.uvarint(), 2, "one topic");
    let _name = c.string();
    assert_eq!(c.uvarint(), 2, "one partition");
    assert_eq!(c.i32(), partition);
    c.i16()
}

/// Partition -> (leader, ISR sorted) from `kafka-topics --describe` through `addr`.
fn leaders(addr: &str) -> Option<BTreeMap<i32, (i32, Vec<i32>)>> {
    let out: BTreeMap<i32, (i32, Vec<i32>)> = describe_topic(addr, TOPIC)
        .into_iter()
        .map(|(p, mut d)| {
            d.isr.sort_unstable();
            (p, (d.leader, d.isr))
        })
        .collect();
    (out.len() == PARTITIONS as usize).then_some(out)
}

/// End offsets, or None while a partition's leader answers with an error (a leadership
/// moving, a replica not yet opened): callers wait.
fn try_end_offsets(boot: &str) -> Option<Vec<i64>> {
    (0..PARTITIONS)
        .map(|p| {
            let mut c = WireClient::connect_leader(boot, TOPIC, p).ok()?;
            c.log_bounds(TOPIC, p).ok().map(|b| b.1)
        })
        .collect()
}

/// Runs the Java SeqProducer; (acked, errors) from its DONE line.
fn java_produce(boot: &str, records: u64, props: &[&str]) -> (u64, u64) {
    let (_, acked, errors, _) = run_seq_producer(
        java::program("SeqProducer")
            .args([boot, TOPIC, &PARTITIONS.to_string(), &records.to_string()])
            .args(props),
        "SeqProducer",
        Duration::from_secs(300),
    );
    (acked, errors)
}

/// Creates TOPIC on the source and writes `records` records with the Java producer
/// (`props` its settings); returns the source's end offsets.
fn produce_to_kafka(kafka: &KafkaCluster, records: u64, props: &[&str]) -> Vec<i64> {
    kafka.create_topic(TOPIC, PARTITIONS, &[]);
    let src = kafka.bootstrap();
    let (acked, errors) = java_produce(&src, records, props);
    assert_eq!((acked, errors), (records, 0), "producing to Kafka");
    end_offsets(&src, TOPIC, PARTITIONS)
}

/// Creates mirror `dr` from `src` through `n1` (metadata synced every second, plus the
/// `extra` settings), adds TOPIC, and waits for the RF=3 mirror topic to have leaders and full
/// ISRs; returns its partitions' leaders and ISRs.
fn mirror_topic(n1: &str, src: &str, extra: &[&str]) -> BTreeMap<i32, (i32, Vec<i32>)> {
    let mut args = vec![
        "create",
        "dr",
        "--source",
        src,
        "--set",
        "mirror.metadata.sync.interval.ms=1000",
    ];
    for x in extra {
        args.extend(["--set", x]);
    }
    cli(n1, &args);
    cli(n1, &["add", "dr", "--topics", TOPIC]);
    // Placed by the controller.
    proc::wait_for(Duration::from_secs(60), "the RF=3 mirror topic", || {
        leaders(n1).filter(|l| l.values().all(|(l, isr)| *l > 0 && isr.len() == 3))
    })
}

fn scenario(c: &mut KmirrorCluster, kafka: &KafkaCluster) {
    let src = kafka.bootstrap();
    let src_end = produce_to_kafka(kafka, RECORDS, &["linger.ms=20", "batch.size=65536"]);
    let n1 = c.node(1).addr();
    // Small fetches, so the ceiling paces the catch-up from the first one (a charge comes
    // after its response, and a default-sized first fetch holds a whole partition here).
    let placed = mirror_topic(
        &n1,
        &src,
        &[
            &format!("mirror.throttled.rate={THROTTLE}"),
            "mirror.fetch.partition.max.bytes=16384",
            "mirror.fetch.max.bytes=65536",
        ],
    );
    let mut led: BTreeMap<i32, usize> = BTreeMap::new();
    for (leader, _) in placed.values() {
        *led.entry(*leader).or_default() += 1;
    }
    let victim = led
        .iter()
        .max_by_key(|(id, n)| (**n, -**id))
        .map(|(id, _)| *id)
        .unwrap();
    eprintln!("leaders {placed:?}; killing node {victim}");

    // Mid-catch-up: some records mirrored, far from all.
    let total: i64 = src_end.iter().sum();
    let survivor = if victim == 1 { 2 } else { 1 };
    let at_kill = proc::wait_for(Duration::from_secs(60), "mirroring under way", || {
        let sum: i64 = describe_mirror(&n1).iter().map(|r| r.3.max(0)).sum();
        (sum > total / 20).then_some(sum)
    });
    assert!(
        at_kill < total * 3 / 4,
        "catch-up nearly done ({at_kill} of {total}) before the kill: the throttle is too loose"
    );
    c.kill(victim as usize);
    let boot_alive = c.node(survivor).addr();

    // New leaders take over and finish the catch-up.
    let started = Instant::now();
    let rows = proc::wait_for(
        Duration::from_secs(180),
        "catch-up on the new leaders",
        || {
            let rows = describe_mirror(&boot_alive);
            (rows.len() == PARTITIONS as usize
                && rows.iter().all(|(p, st, s, d, lag)| {
                    st == "MIRRORING" && *lag == 0 && *s == src_end[*p as usize] && s == d
                }))
            .then_some(rows)
        },
    );
    eprintln!(
        "caught up {:.1} s after the kill ({at_kill} of {total} mirrored before it)",
        started.elapsed().as_secs_f64()
    );
    let now = leaders(&boot_alive).expect("describe after the kill");
    assert!(
        now.values().all(|(l, _)| *l != victim),
        "a partition still led by the killed node: {now:?}"
    );
    assert_eq!(
        end_offsets(&boot_alive, TOPIC, PARTITIONS),
        src_end,
        "destination ends"
    );
    for p in 0..PARTITIONS {
        log_equal(&src, &boot_alive, TOPIC, p, src_end[p as usize])
            .unwrap_or_else(|e| panic!("not log-equal after the kill: {e}"));
    }

    // The killed node comes back and replicates the mirror partitions like any other.
    c.restart(victim as usize);
    proc::wait_for(Duration::from_secs(120), "full ISRs again", || {
        leaders(&boot_alive).filter(|l| l.values().all(|(_, isr)| *isr == vec![1, 2, 3]))
    });

    // Every node answers DescribeMirrors, identically.
    for id in 1..=3 {
        let got = proc::wait_for(Duration::from_secs(30), "the same DescribeMirrors", || {
            let got = describe_mirror(&c.node(id).addr());
            (got == rows).then_some(got)
        });
        assert_eq!(got, rows, "DescribeMirrors via node {id}");
    }

    // The inter-broker APIs, raw: ReadMirrorStates answers every partition MIRRORING (2)
    // through every node; BumpLeaderEpochs through a node that does not lead the partition
    // raises its epoch cluster-wide, and names an unknown topic id UNKNOWN_TOPIC_ID (100).
    let mut want: Vec<MirrorStateRow> = (0..PARTITIONS)
        .map(|p| (TOPIC.to_string(), p, 2, -1, 0))
        .collect();
    for id in 1..=3 {
        assert_eq!(
            read_mirror_states(&c.node(id).addr()),
            (0, want.clone()),
            "ReadMirrorStates via node {id}"
        );
    }
    // WriteMirrorStates through each node in turn (so through at least two that do not
    // hold the seat): the state it writes (MIRRORING, unchanged) and last mirrored offset
    // are on the replicated store, visible through every node.
    for via in 1..=3 {
        let offset = 1000 + via as i64;
        assert_eq!(
            write_mirror_state(&c.node(via).addr(), "dr", TOPIC, 1, 2, offset),
            (0, 0),
            "WriteMirrorStates via node {via}"
        );
        want[1].3 = offset;
        for id in 1..=3 {
            let got = proc::wait_for(Duration::from_secs(30), "the written mirror state", || {
                let got = read_mirror_states(&c.node(id).addr());
                (got == (0, want.clone())).then_some(got)
            });
            assert_eq!(got, (0, want.clone()), "ReadMirrorStates via node {id}");
        }
    }
    // Seed 000's codes: an unknown mirror is UNKNOWN_MIRROR (136) at the top, an unknown topic
    // UNKNOWN_TOPIC_OR_PARTITION (3) on its partition.
    let (unknown_mirror, _) = write_mirror_state(&c.node(2).addr(), "nope", TOPIC, 0, 2, 1);
    assert_eq!(
        unknown_mirror, 136,
        "WriteMirrorStates of an unknown mirror"
    );
    assert_eq!(
        write_mirror_state(&c.node(3).addr(), "dr", "ghost", 0, 2, 1),
        (0, 3),
        "WriteMirrorStates of an unknown topic"
    );
    let info = WireClient::connect(&boot_alive)
        .unwrap()
        .partition_info(TOPIC, 0)
        .unwrap();
    let via = c.node(if info.leader_id == 1 { 2 } else { 1 }).addr();
    let target = info.leader_epoch + 3;
    assert_eq!(bump_leader_epochs(&via, info.topic_id, 0, target), 0);
    proc::wait_for(Duration::from_secs(30), "the bumped leader epoch", || {
        let e = WireClient::connect(&boot_alive)
            .ok()?
            .partition_info(TOPIC, 0)
            .ok()?
            .leader_epoch;
        (e >= target).then_some(e)
    });
    assert_eq!(
        bump_leader_epochs(&via, uuid::Uuid::from_u128(7), 0, 1),
        100,
        "BumpLeaderEpochs of an unknown topic id"
    );

    // Failover issued while the seat moves, through a node that did not create the mirror:
    // the seat dies, and `remove` goes to a node that still names it as the quorum leader.
    // That node answers COORDINATOR_NOT_AVAILABLE (its forward is refused) until a new seat
    // is elected; the CLI says what it waits on and retries, so the command succeeds.
    let (seat, _) = WireClient::connect(&boot_alive)
        .unwrap()
        .quorum_leader()
        .unwrap();
    let seat = seat as usize;
    let other = c.node(if seat == 2 { 3 } else { 2 }).addr();
    c.kill(seat);
    let ran = kmirror_tests::mirror::cli(&other, &["remove", "dr", "--topics", TOPIC]);
    eprintln!(
        "remove while seat {seat} is down:\n{}{}",
        ran.stdout, ran.stderr
    );
    assert!(
        ran.status.success(),
        "remove while the seat moves failed: {}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("waiting") && ran.stderr.contains("COORDINATOR_NOT_AVAILABLE"),
        "the CLI said what it waited on: {}",
        ran.stderr
    );
    c.restart(seat);
    // The seat commits STOPPING; each partition's leader then does the log work and
    // commits STOPPED (KIP-1279: the partition leader runs its failover).
    let stopped = proc::wait_for(Duration::from_secs(60), "every partition STOPPED", || {
        let rows = describe_mirror(&other);
        (rows.len() == PARTITIONS as usize && rows.iter().all(|r| r.1 == "STOPPED")).then_some(rows)
    });
    assert_eq!(
        stopped.len(),
        PARTITIONS as usize,
        "after remove: {stopped:?}"
    );
    proc::wait_for(
        Duration::from_secs(120),
        "full ISRs after the failover",
        || leaders(&other).filter(|l| l.values().all(|(_, isr)| *isr == vec![1, 2, 3])),
    );
    let after_failover = end_offsets(&c.bootstrap(), TOPIC, PARTITIONS);
    for p in 0..PARTITIONS as usize {
        // Truncated to the LSO (= the end: no transactions), then one MIRROR_PID_RESET.
        assert_eq!(
            after_failover[p],
            src_end[p] + 1,
            "partition {p} after failover"
        );
    }
    // The failover stored each partition's last mirrored record offset (seed 003's
    // LastMirroredOffset, for a failback); ReadMirrorStates through every node shows it with
    // STOPPED (5). WriteMirrorStates RemovedTopics then drops the stopped topic's states.
    let stopped_states: Vec<MirrorStateRow> = (0..PARTITIONS)
        .map(|p| (TOPIC.to_string(), p, 5, src_end[p as usize] - 1, 0))
        .collect();
    for id in 1..=3 {
        let got = proc::wait_for(Duration::from_secs(30), "the stopped mirror states", || {
            let got = read_mirror_states(&c.node(id).addr());
            (got == (0, stopped_states.clone())).then_some(got)
        });
        assert_eq!(
            got,
            (0, stopped_states.clone()),
            "ReadMirrorStates via node {id}"
        );
    }
    assert_eq!(remove_mirror_states(&other, TOPIC), (0, 0), "RemovedTopics");
    assert_eq!(
        remove_mirror_states(&other, TOPIC),
        (0, 138),
        "RemovedTopics again: TOPIC_NOT_IN_MIRROR"
    );
    for id in 1..=3 {
        let got = proc::wait_for(Duration::from_secs(30), "the removed states", || {
            let got = read_mirror_states(&c.node(id).addr());
            got.1.is_empty().then_some(got)
        });
        assert_eq!(got, (0, Vec::new()), "ReadMirrorStates via node {id}");
    }
    let (acked, errors) = java_produce(&c.bootstrap(), 600, &["enable.idempotence=true"]);
    assert_eq!((acked, errors), (600, 0), "producing after failover");
    let final_end = end_offsets(&c.bootstrap(), TOPIC, PARTITIONS);
    let appended: i64 = final_end
        .iter()
        .zip(&after_failover)
        .map(|(a, b)| a - b)
        .sum();
    assert_eq!(appended, 600, "records appended after failover");

    // Every replica on every node: the source's batches, then the same bytes everywhere.
    std::thread::sleep(Duration::from_secs(2));
    let source: Vec<Bytes> = (0..PARTITIONS)
        .map(|p| {
            let (start, batches) = read_batches(&src, TOPIC, p, src_end[p as usize]).unwrap();
            assert_eq!(start, 0);
            let mut b = Vec::new();
            for x in batches {
                b.extend_from_slice(&x.bytes);
            }
            Bytes::from(b)
        })
        .collect();
    c.stop_all();
    for p in 0..PARTITIONS {
        let logs = c.replica_logs(TOPIC, p);
        let want = &source[p as usize];
        for (i, (end, bytes)) in logs.iter().enumerate() {
            assert_eq!(
                *end,
                final_end[p as usize],
                "{TOPIC}-{p}: node {} end",
                i + 1
            );
            assert!(
                bytes.len() > want.len() && bytes[..want.len()] == want[..],
                "{TOPIC}-{p}: node {} is not log-equal with the source",
                i + 1
            );
            assert!(
                *bytes == logs[0].1,
                "{TOPIC}-{p}: node {} differs from node 1",
                i + 1
            );
        }
    }
}

/// Three kmirror nodes, one core each, topics replicated to all three by default.
fn start_three() -> KmirrorCluster {
    KmirrorCluster::start(
        3,
        ClusterOpts {
            extra: vec![
                "--cores".into(),
                "1".into(),
                "--default-replication-factor".into(),
                "3".into(),
            ],
            session_timeout_ms: 3000,
            ..ClusterOpts::default()
        },
    )
}

#[test]
fn kafka_source_mirrored_into_three_kmirror_nodes_through_a_leader_kill() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let mut c = start_three();
    c.dump_logs_on_panic(80, |c| scenario(c, &kafka));
}

/// SIGSTOP (`true`) or SIGCONT (`false`) node `id`'s process: a stopped node keeps its
/// sockets and its place in the ISR, but fetches nothing.
fn freeze(c: &KmirrorCluster, id: usize, stop: bool) {
    let sig = if stop { "-STOP" } else { "-CONT" };
    let ok = std::process::Command::new("kill")
        .args([sig, &c.node(id).pid().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} node {id}");
}

/// DescribeMirrors in a cluster reports what a consumer can read: the destination offset is
/// the partition's high watermark on its leader (what ListOffsets LATEST answers there) and
/// the lag is measured to it, not to the leader's log end. A frozen follower stays in the
/// ISR (long session and replica lag here), so the high watermark stays while the leader
/// keeps mirroring; once it runs again, the lag closes.
#[test]
fn describe_mirrors_lag_is_measured_to_the_leaders_high_watermark() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let mut c = KmirrorCluster::start(
        3,
        ClusterOpts {
            extra: [
                "--cores",
                "1",
                "--default-replication-factor",
                "3",
                "--replica-lag-time-max-ms",
                "120000",
            ]
            .map(String::from)
            .to_vec(),
            session_timeout_ms: 60_000,
            ..ClusterOpts::default()
        },
    );
    c.dump_logs_on_panic(80, |c| {
        let src = kafka.bootstrap();
        let first = produce_to_kafka(&kafka, 3_000, &["linger.ms=20"]);
        let n1 = c.node(1).addr();
        let placed = mirror_topic(&n1, &src, &[]);
        let caught_up = |via: &str, ends: &[i64]| {
            let rows = describe_mirror(via);
            rows.len() == PARTITIONS as usize
                && rows.iter().all(|(p, st, s, d, lag)| {
                    st == "MIRRORING" && *lag == 0 && *s == ends[*p as usize] && s == d
                })
        };
        proc::wait_for(Duration::from_secs(60), "caught up", || {
            caught_up(&n1, &first).then_some(())
        });
        // Freeze a node that does not hold the seat; the others keep the quorum.
        let (seat, _) = WireClient::connect(&n1).unwrap().quorum_leader().unwrap();
        // FindCoordinator key type MIRROR (2) names the seat, whichever node is asked.
        for id in 1..=3 {
            let addr = c.node(id).addr();
            let (node, code) = kmirror_tests::mirror::find_mirror_coordinator(&addr, "dr");
            assert_eq!(
                (node, code),
                (seat, 0),
                "FindCoordinator(MIRROR) via node {id}"
            );
        }
        let frozen = (1..=3).find(|id| *id != seat as usize).unwrap();
        let live: Vec<usize> = (1..=3).filter(|id| *id != frozen).collect();
        let others: Vec<i32> = placed
            .iter()
            .filter(|(_, (l, _))| *l != frozen as i32)
            .map(|(p, _)| *p)
            .collect();
        eprintln!("leaders {placed:?}; seat {seat}; freezing node {frozen}");
        assert!(!others.is_empty(), "node {frozen} leads every partition");
        freeze(c, frozen, true);
        let (acked, errors) = java_produce(&src, 3_000, &["linger.ms=20"]);
        assert_eq!((acked, errors), (3_000, 0), "producing to Kafka");
        let second = end_offsets(&src, TOPIC, PARTITIONS);
        let boot = c.node(seat as usize).addr();
        // The leaders mirror the new records (the source offset shows they saw them), but
        // the high watermark stays at the first end: that is what consumers can read.
        proc::wait_for(Duration::from_secs(60), "the new source ends seen", || {
            let rows = describe_mirror(&boot);
            others
                .iter()
                .all(|p| {
                    rows.iter()
                        .any(|r| r.0 == *p as i64 && r.2 == second[*p as usize])
                })
                .then_some(())
        });
        std::thread::sleep(Duration::from_secs(3));
        for p in &others {
            let hw = WireClient::connect_leader(&boot, TOPIC, *p)
                .and_then(|mut w| w.log_bounds(TOPIC, *p))
                .expect("log bounds")
                .1;
            assert_eq!(
                hw, first[*p as usize],
                "{TOPIC}-{p}: the high watermark stays"
            );
        }
        for via in &live {
            let rows = describe_mirror(&c.node(*via).addr());
            for p in &others {
                let (s, d) = (second[*p as usize], first[*p as usize]);
                assert_eq!(
                    rows.iter().find(|r| r.0 == *p as i64),
                    Some(&(*p as i64, "MIRRORING".to_string(), s, d, s - d)),
                    "DescribeMirrors via node {via}: {TOPIC}-{p} is readable to its high \
                     watermark, not the leader's log end"
                );
            }
        }
        freeze(c, frozen, false);
        for via in 1..=3 {
            proc::wait_for(Duration::from_secs(60), "caught up again", || {
                caught_up(&c.node(via).addr(), &second).then_some(())
            });
        }
    });
}

/// Stops every node, then checks each partition's three replicas: byte-equal to each other
/// and a prefix of the source's batches (`source[p]`). Returns each partition's log end.
fn replicas_equal_and_source_prefixes(c: &mut KmirrorCluster, source: &[Bytes]) -> Vec<i64> {
    c.stop_all();
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        let logs = c.replica_logs(TOPIC, p);
        let want = &source[p as usize];
        for (i, (end, bytes)) in logs.iter().enumerate() {
            assert_eq!(*end, logs[0].0, "{TOPIC}-{p}: node {} log end", i + 1);
            assert!(
                *bytes == logs[0].1,
                "{TOPIC}-{p}: node {} differs from node 1",
                i + 1
            );
            assert!(
                bytes.len() <= want.len() && want[..bytes.len()] == bytes[..],
                "{TOPIC}-{p}: node {} is not a prefix of the source's log",
                i + 1
            );
        }
        ends.push(logs[0].0);
    }
    ends
}

fn source_batches(src: &str, ends: &[i64]) -> Vec<Bytes> {
    (0..PARTITIONS)
        .map(|p| {
            let (start, batches) = read_batches(src, TOPIC, p, ends[p as usize]).unwrap();
            assert_eq!(start, 0);
            let mut b = Vec::new();
            for x in batches {
                b.extend_from_slice(&x.bytes);
            }
            Bytes::from(b)
        })
        .collect()
}

#[test]
fn only_leaders_fetch_and_followers_replicate_the_mirror() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let mut c = start_three();
    c.dump_logs_on_panic(80, |c| {
        let src = kafka.bootstrap();
        let src_end = produce_to_kafka(&kafka, 30_000, &["linger.ms=20"]);
        let n1 = c.node(1).addr();
        let placed = mirror_topic(&n1, &src, &[]);
        let mine: Vec<i32> = placed
            .iter()
            .filter(|(_, (l, _))| *l == 1)
            .map(|(p, _)| *p)
            .collect();
        eprintln!("leaders {placed:?}; node 1 leads {mine:?}");
        assert!(!mine.is_empty(), "node 1 leads no partition of {placed:?}");
        // Node 1's partitions catch up through its fetchers (read from the leader).
        proc::wait_for(
            Duration::from_secs(90),
            "node 1's partitions mirrored",
            || {
                let ends = try_end_offsets(&c.bootstrap())?;
                mine.iter()
                    .all(|p| ends[*p as usize] == src_end[*p as usize])
                    .then_some(())
            },
        );
        for p in &mine {
            log_equal(&src, &c.bootstrap(), TOPIC, *p, src_end[*p as usize])
                .unwrap_or_else(|e| panic!("not log-equal: {e}"));
        }
        // Leadership moves: node 2 shuts down (controlled, its leaderships move at once).
        // Partitions node 1 now leads get its fetchers, starting at its own log end.
        assert!(c.stop(2), "node 2 stops cleanly");
        let moved = proc::wait_for(
            Duration::from_secs(60),
            "node 2's leaderships moved",
            || leaders(&n1).filter(|l| l.values().all(|(l, _)| *l == 1 || *l == 3)),
        );
        let mine: Vec<i32> = moved
            .iter()
            .filter(|(_, (l, _))| *l == 1)
            .map(|(p, _)| *p)
            .collect();
        eprintln!("after node 2 stopped: {moved:?}; node 1 leads {mine:?}");
        proc::wait_for(
            Duration::from_secs(90),
            "node 1's new partitions mirrored",
            || {
                let ends = try_end_offsets(&n1)?;
                mine.iter()
                    .all(|p| ends[*p as usize] == src_end[*p as usize])
                    .then_some(())
            },
        );
        c.restart(2);
        proc::wait_for(Duration::from_secs(120), "full ISRs again", || {
            leaders(&n1).filter(|l| l.values().all(|(_, isr)| *isr == vec![1, 2, 3]))
        });
        // Followers fetch the last high watermark, then every replica is compared.
        std::thread::sleep(Duration::from_secs(3));
        let source = source_batches(&src, &src_end);
        let ends = replicas_equal_and_source_prefixes(c, &source);
        for p in &mine {
            assert_eq!(
                ends[*p as usize], src_end[*p as usize],
                "{TOPIC}-{p} on every replica"
            );
        }
    });
}

/// Two-record batches `tag-i-a`, `tag-i-b` to partition 0 of `topic` through its leader
/// (found from `boot`), acks=all; each must be acknowledged.
fn produce_batches(boot: &str, topic: &str, n: usize, tag: &str) {
    let mut c = WireClient::connect_leader(boot, topic, 0).expect("connect to leader");
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..n {
        let (v1, v2) = (format!("{tag}-{i}-a"), format!("{tag}-{i}-b"));
        let b = kmirror_tests::records::batch(&[v1.as_bytes(), v2.as_bytes()], 1_700_000_000_000);
        loop {
            let (code, _) = c.produce_raw(topic, 0, b.clone(), -1).expect("produce");
            // NOT_LEADER_OR_FOLLOWER (nothing appended) while a new topic's leader opens
            // its replica: ask again.
            if code == 6 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                c = WireClient::connect_leader(boot, topic, 0).expect("connect to leader");
                continue;
            }
            assert_eq!(code, 0, "produce to {boot} {topic}");
            break;
        }
    }
}

/// Failback into the cluster (the single-node `kmirror_failback_truncates_exactly_the_
/// divergent_tail`, with the three-node cluster as the side that fails back): the cluster
/// is the first source, a one-node kmirror K mirrors it and fails over, both write, then the
/// cluster mirrors from K. The partition leader must truncate its divergent tail and the
/// followers must follow that truncation: every replica ends byte-equal to K's log.
#[test]
fn failback_into_a_three_node_cluster_truncates_the_divergent_tail_on_every_replica() {
    failback_into_the_cluster(false);
}

/// The same failback after the cluster's leader epoch of the partition moved well past K's
/// (as many leader elections in the cluster would): the divergent tail is written at that
/// higher epoch, and K's batches then carry a lower one.
#[test]
fn failback_into_a_cluster_whose_leader_epoch_is_above_the_sources() {
    failback_into_the_cluster(true);
}

fn failback_into_the_cluster(raise_cluster_epoch: bool) {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut c = start_three();
    let k = kmirror_tests::kmirror::KmirrorNode::builder()
        .args(&["--cores", "1"])
        .start();
    let ka = k.addr();
    c.dump_logs_on_panic(80, |c| {
        let t = "payments";
        let (cb, n1) = (c.bootstrap(), c.node(1).addr());
        assert_eq!(
            WireClient::connect(&n1)
                .unwrap()
                .create_topic(t, 1, 3, &[])
                .unwrap(),
            0
        );
        produce_batches(&cb, t, 10, "c1");
        let bounds = |x: &str| {
            WireClient::connect_leader(x, t, 0)
                .and_then(|mut w| w.log_bounds(t, 0))
                .expect("log bounds")
        };

        // Cluster -> K, then K fails over.
        cli(
            &ka,
            &[
                "create",
                "ab",
                "--source",
                &cb,
                "--set",
                "mirror.metadata.sync.interval.ms=500",
            ],
        );
        cli(&ka, &["add", "ab", "--topics", t]);
        proc::wait_for(Duration::from_secs(60), "K caught up", || {
            let ran = cli(&ka, &["describe", "ab", "--json"]);
            let rows: serde_json::Value = serde_json::from_str(ran.stdout.trim()).ok()?;
            rows.as_array()
                .is_some_and(|rs| {
                    rs.len() == 1
                        && rs[0]["state"] == "MIRRORING"
                        && rs[0]["destination_offset"].as_i64() == Some(20)
                })
                .then_some(())
        });
        cli(&ka, &["remove", "ab", "--topics", t]);
        assert_eq!(
            bounds(&ka).1,
            21,
            "K: 20 mirrored records + the PID reset marker"
        );

        if raise_cluster_epoch {
            let info = WireClient::connect(&n1)
                .unwrap()
                .partition_info(t, 0)
                .unwrap();
            let target = info.leader_epoch + 10;
            assert_eq!(bump_leader_epochs(&n1, info.topic_id, 0, target), 0);
            proc::wait_for(Duration::from_secs(30), "the raised leader epoch", || {
                let e = WireClient::connect(&n1)
                    .ok()?
                    .partition_info(t, 0)
                    .ok()?
                    .leader_epoch;
                (e >= target).then_some(e)
            });
        }
        // Both sides write: the cluster's tail (3 batches) never reaches K.
        produce_batches(&ka, t, 5, "k");
        produce_batches(&cb, t, 3, "c2");
        assert_eq!(bounds(&cb).1, 26, "the cluster's divergent end");
        let end = bounds(&ka).1;
        assert_eq!(end, 21 + 10, "K keeps everything it acked");

        // Failback: the cluster mirrors from K and must drop exactly 20..26 on every replica.
        cli(
            &n1,
            &[
                "create",
                "dr",
                "--source",
                &ka,
                "--set",
                "mirror.metadata.sync.interval.ms=500",
            ],
        );
        cli(&n1, &["add", "dr", "--topics", t]);
        let rows = proc::wait_for(Duration::from_secs(60), "the cluster caught up", || {
            let rows = describe_mirror(&n1);
            (rows.len() == 1 && rows[0] == (0, "MIRRORING".to_string(), end, end, 0))
                .then_some(rows)
        });
        for id in 1..=3 {
            let got = proc::wait_for(Duration::from_secs(30), "the same DescribeMirrors", || {
                let got = describe_mirror(&c.node(id).addr());
                (got == rows).then_some(got)
            });
            assert_eq!(got, rows, "DescribeMirrors via node {id}");
        }
        // DescribeMirrors shows the leader's log end; consumers read up to the high
        // watermark, which follows once the followers re-truncated and caught up.
        proc::wait_for(
            Duration::from_secs(30),
            "the cluster's HW at K's end",
            || (bounds(&cb).1 == end).then_some(()),
        );
        log_equal(&ka, &cb, t, 0, end).unwrap_or_else(|e| panic!("leader after failback: {e}"));
        proc::wait_for(Duration::from_secs(30), "full ISR", || {
            describe_topic(&n1, t)
                .get(&0)
                .filter(|d| d.isr.len() == 3)
                .cloned()
        });

        // Every replica, from its files: K's batches exactly.
        let (start, batches) = read_batches(&ka, t, 0, end).unwrap();
        assert_eq!(start, 0);
        let want: Vec<u8> = batches
            .iter()
            .flat_map(|b| b.bytes.iter().copied())
            .collect();
        // Followers fetch the last high watermark.
        std::thread::sleep(Duration::from_secs(3));
        c.stop_all();
        let logs = c.replica_logs(t, 0);
        let report: Vec<(i64, usize)> = logs.iter().map(|(e, b)| (*e, b.len())).collect();
        for (i, (e, bytes)) in logs.iter().enumerate() {
            assert!(
                *e == end && bytes[..] == want[..],
                "{t}-0 on node {}: end {e}, {} bytes; K: end {end}, {} bytes; all replicas \
                 (end, bytes): {report:?}",
                i + 1,
                bytes.len(),
                want.len()
            );
        }
    });
}
