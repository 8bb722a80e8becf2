//! Issue 22's planned switchover and reverse, through the CLI between two kmirror nodes and
//! from an Apache Kafka 4.1.1 source: a Java producer writes through the switchover and
//! every record it had acknowledged is on both sides at its offset; the command resumes
//! after stopping at each step and after a crash of either side; nothing is truncated.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kmirror_tests::deps;
use kmirror_tests::java;
use kmirror_tests::mirror;
use kmirror_tests::oracle::read_records;
use kmirror_tests::proc::{self, LineChild, Ran};
use kmirror_tests::python;
use kmirror_tests::records;
use kmirror_tests::{KafkaCluster, KmirrorNode, WireClient};

const NOT_ENOUGH_REPLICAS: i16 = 19;
const READ_ONLY_TOPIC: i16 = 134;
const FENCE: &str = "mirror.write.fence";

/// `kmirror mirror --bootstrap DST switchover ARGS…`, stopping after `failpoint` if given.
fn switchover(dst: &str, args: &[&str], failpoint: Option<&str>) -> Ran {
    let mut cmd = Command::new(deps::kmirror_bin());
    cmd.args(["mirror", "--bootstrap", dst, "switchover"])
        .args(args);
    if let Some(step) = failpoint {
        cmd.env("KMIRROR_SWITCHOVER_FAILPOINT", step);
    }
    let ran = proc::run(&mut cmd, Duration::from_secs(150));
    eprintln!(
        "switchover {args:?} (failpoint {failpoint:?}): {}\n{}{}",
        ran.status, ran.stdout, ran.stderr
    );
    ran
}

/// Runs the switchover up to `step` (it must stop there, saying so).
fn switchover_until(dst: &str, step: &str) -> Ran {
    let ran = switchover(dst, &["dr", "--all"], Some(step));
    assert!(
        !ran.status.success() && ran.stderr.contains(&format!("failpoint {step}")),
        "the switchover did not stop at {step}:\n{}{}",
        ran.stdout,
        ran.stderr
    );
    ran
}

fn produce_code(boot: &str, topic: &str, partition: i32) -> i16 {
    let mut c = WireClient::connect_leader(boot, topic, partition).expect("connect");
    c.produce_raw(topic, partition, records::batch(&[b"probe"], 1), -1)
        .expect("produce")
        .0
}

/// A SeqProducer (acks=all, idempotent) at `rate`/s until `stop` exists.
fn producer(boot: &str, topic: &str, parts: i32, rate: u32, stop: &Path) -> LineChild {
    LineChild::spawn(java::program("SeqProducer").args([
        boot,
        topic,
        &parts.to_string(),
        "100000000",
        &format!("seqproducer.rate={rate}"),
        &format!("seqproducer.stop={}", stop.display()),
        "delivery.timeout.ms=120000",
    ]))
}

/// The librdkafka twin of [`producer`].
fn librdkafka_producer(boot: &str, topic: &str, parts: i32, rate: u32, stop: &Path) -> LineChild {
    LineChild::spawn(python::script("seq_producer.py").args([
        boot,
        topic,
        &parts.to_string(),
        "100000000",
        &format!("seqproducer.rate={rate}"),
        &format!("seqproducer.stop={}", stop.display()),
    ]))
}

/// (partition, offset) -> seq of every acknowledged record; the number of failed ones.
fn acked(lines: &[String]) -> (BTreeMap<(i32, i64), i64>, usize) {
    let acks = lines
        .iter()
        .filter_map(|l| {
            let mut c = l.strip_prefix("ACK ")?.split(' ');
            let p = c.next()?.parse().ok()?;
            let s = c.next()?.parse().ok()?;
            let o = c.next()?.parse().ok()?;
            Some(((p, o), s))
        })
        .collect();
    let errors = lines.iter().filter(|l| l.starts_with("ERR ")).count();
    (acks, errors)
}

/// Every acknowledged record is at its offset on `boot`, with its value.
fn assert_acked_at_their_offsets(
    boot: &str,
    topic: &str,
    parts: i32,
    acks: &BTreeMap<(i32, i64), i64>,
) {
    for p in 0..parts {
        let recs: BTreeMap<i64, Vec<u8>> = read_records(boot, topic, p)
            .unwrap_or_else(|e| panic!("read {topic}-{p} on {boot}: {e}"))
            .into_iter()
            .filter_map(|(o, v)| Some((o, v?.to_vec())))
            .collect();
        for ((_, offset), seq) in acks.range((p, i64::MIN)..=(p, i64::MAX)) {
            let want = format!("{p}:{seq}:");
            let got = recs
                .get(offset)
                .map(|v| String::from_utf8_lossy(v).to_string());
            assert!(
                got.as_deref().is_some_and(|v| v.starts_with(&want)),
                "{topic}-{p}@{offset} on {boot}: acknowledged as seq {seq}, holds {got:?}"
            );
        }
    }
}

/// Two kmirror nodes, A mirrored to B as "dr", with a Java and a librdkafka producer
/// writing to A.
struct Pair {
    a: KmirrorNode,
    b: KmirrorNode,
    aa: String,
    ba: String,
    stop: std::path::PathBuf,
    _dir: tempfile::TempDir,
    writers: Vec<(&'static str, LineChild)>,
}

const TOPIC: &str = "orders";
const PARTS: i32 = 3;

fn pair_with_producers() -> Pair {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(KmirrorNode::start);
        let b = s.spawn(KmirrorNode::start);
        (a.join().expect("a"), b.join().expect("b"))
    });
    let (aa, ba) = (a.addr(), b.addr());
    let mut c = WireClient::connect(&aa).expect("connect a");
    assert_eq!(c.create_topic(TOPIC, PARTS, 1, &[]).expect("create"), 0);
    drop(c);
    mirror::create(&ba, "dr", &aa, mirror::FAST);
    mirror::add_topics(&ba, "dr", &[TOPIC]);
    let dir = tempfile::tempdir().expect("temp dir");
    let stop = dir.path().join("stop");
    let writers = vec![
        ("java", producer(&aa, TOPIC, PARTS, 300, &stop)),
        (
            "librdkafka",
            librdkafka_producer(&aa, TOPIC, PARTS, 200, &stop),
        ),
    ];
    // Both producers writing (the JVM's start can take seconds), records mirrored.
    proc::wait_for(
        Duration::from_secs(90),
        "both producers acknowledged and records mirrored from every partition",
        || {
            (writers.iter().all(|(_, w)| w.count("ACK ") >= 30)
                && mirror::bounds(&ba, TOPIC, PARTS).is_ok_and(|b| b.iter().all(|(_, e)| *e > 50)))
            .then_some(())
        },
    );
    Pair {
        a,
        b,
        aa,
        ba,
        stop,
        _dir: dir,
        writers,
    }
}

/// After a finished switchover: A follows B (read-only, fence lifted); the producers
/// stopped, none surfaced the fence (retried), none had a record acknowledged at or past
/// where A was fenced (`fenced_at`); B takes new writes and A copies them; every
/// acknowledged record is on both at its offset, log-equal, nothing truncated. Returns the
/// number of acknowledged records.
fn judge(pair: Pair, fenced_at: &[i64]) -> usize {
    let Pair {
        aa,
        ba,
        stop,
        writers,
        ..
    } = pair;
    assert!(!mirror::topic_configs(&aa, TOPIC).contains_key(FENCE));
    assert_eq!(produce_code(&aa, TOPIC, 2), READ_ONLY_TOPIC);
    std::fs::write(&stop, b"").expect("stop file");
    let mut acks = BTreeMap::new();
    for (client, writer) in writers {
        let (_, lines) = writer.wait(Duration::from_secs(200));
        let (mine, errors) = acked(&lines);
        let classes: std::collections::BTreeSet<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("ERR ")?.split(' ').nth(2))
            .collect();
        eprintln!(
            "{client}: {} acknowledged, {errors} failed ({classes:?})",
            mine.len()
        );
        assert!(mine.len() >= 30, "{client} acknowledged {}", mine.len());
        // The fence is retried, never surfaced: the failures are the read-only topic's.
        assert!(
            !classes.contains("NotEnoughReplicasException")
                && !classes.contains("NOT_ENOUGH_REPLICAS"),
            "{client} surfaced the fence instead of retrying: {classes:?}"
        );
        let before = acks.len();
        acks.extend(mine.iter().map(|(k, v)| (*k, *v)));
        assert_eq!(
            acks.len(),
            before + mine.len(),
            "two records acknowledged at one offset"
        );
    }
    for p in 0..PARTS {
        let hi = acks
            .range((p, i64::MIN)..=(p, i64::MAX))
            .map(|((_, o), _)| *o)
            .max()
            .unwrap_or(-1);
        assert!(
            hi < fenced_at[p as usize],
            "{TOPIC}-{p}: acked at {hi}, at or after the fence at {}",
            fenced_at[p as usize]
        );
    }

    // The new primary takes writes; the old source copies them at the same offsets.
    let more = proc::run(
        java::program("SeqProducer").args([ba.as_str(), TOPIC, &PARTS.to_string(), "600"]),
        Duration::from_secs(120),
    );
    assert_eq!(
        more.stdout
            .lines()
            .filter(|l| l.starts_with("ACK "))
            .count(),
        600
    );
    let ends = mirror::wait_caught_up(&ba, &aa, TOPIC, PARTS, false, Duration::from_secs(60));
    let reports = mirror::assert_log_equal(&ba, &aa, TOPIC, &ends);
    assert!(reports.iter().all(|r| r.log_start == 0), "{reports:?}");
    assert_acked_at_their_offsets(&aa, TOPIC, PARTS, &acks);
    assert_acked_at_their_offsets(&ba, TOPIC, PARTS, &acks);
    let rows = mirror::describe(&aa, Some("dr"));
    assert!(
        rows.len() == PARTS as usize && rows.iter().all(|r| r.state == "MIRRORING"),
        "{rows:?}"
    );
    acks.len()
}

/// Kmirror to kmirror with producers writing to the source throughout: the switchover
/// stops after each step and resumes (the source killed and restarted while fenced, the
/// destination after the failover); producers are fenced with a retriable error, then the
/// destination takes writes and the old source follows it with nothing truncated.
#[test]
fn switchover_between_kmirrors_resumes_after_each_step_and_loses_no_acknowledged_record() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let mut pair = pair_with_producers();
    let (aa, ba) = (pair.aa.clone(), pair.ba.clone());

    // 1. Fenced: the producers' writes are refused with a retriable code, A stops growing.
    switchover_until(&ba, "fenced");
    assert_eq!(
        mirror::topic_configs(&aa, TOPIC).get(FENCE),
        Some(&Some("dr".to_owned()))
    );
    assert_eq!(produce_code(&aa, TOPIC, 0), NOT_ENOUGH_REPLICAS);
    let fenced_at = mirror::end_offsets(&aa, TOPIC, PARTS);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        mirror::end_offsets(&aa, TOPIC, PARTS),
        fenced_at,
        "A grew while fenced"
    );
    // The source crashes while fenced: the fence is durable.
    pair.a.kill_now();
    pair.a.start_again();
    assert_eq!(produce_code(&aa, TOPIC, 1), NOT_ENOUGH_REPLICAS);

    // 2. Failed over once B holds everything A had: B's log is A's plus its failover marker.
    switchover_until(&ba, "failed-over");
    assert!(mirror::describe(&ba, Some("dr"))
        .iter()
        .all(|r| r.state == "STOPPED"));
    let b_ends = mirror::end_offsets(&ba, TOPIC, PARTS);
    for p in 0..PARTS as usize {
        assert_eq!(
            b_ends[p],
            fenced_at[p] + 1,
            "{TOPIC}-{p}: B's end vs A's fenced end"
        );
    }
    assert!(
        !mirror::topic_configs(&ba, TOPIC).contains_key(FENCE),
        "the fence reached the destination"
    );
    // The destination crashes after the failover.
    pair.b.kill_now();
    pair.b.start_again();

    // 3. The reverse mirror created, then the topics added; then the whole command again.
    switchover_until(&ba, "reverse-created");
    assert!(mirror::cli_ok(&aa, &["list"]).stdout.contains("dr"));
    switchover_until(&ba, "reverse-added");
    let done = switchover(&ba, &["dr", "--all"], None);
    assert!(
        done.status.success(),
        "switchover failed:\n{}{}",
        done.stdout,
        done.stderr
    );
    assert!(done.stdout.contains("done:"), "{}", done.stdout);
    // Rerunning a finished switchover changes nothing and succeeds.
    let again = switchover(&ba, &["dr", "--all"], None);
    assert!(
        again.status.success(),
        "rerun failed:\n{}{}",
        again.stdout,
        again.stderr
    );
    judge(pair, &fenced_at);
}

/// The same in one run, timed: how long producers wait on the fence is the switchover's
/// duration.
#[test]
fn switchover_between_kmirrors_in_one_run_with_producers_writing() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let pair = pair_with_producers();
    let started = std::time::Instant::now();
    let done = switchover(&pair.ba, &["dr", "--all"], None);
    let took = started.elapsed();
    assert!(
        done.status.success(),
        "switchover failed:\n{}{}",
        done.stdout,
        done.stderr
    );
    // "failed over: orders (log ends: 0@55, 1@55, 2@54)": where A was fenced.
    let line = done
        .stdout
        .lines()
        .find(|l| l.starts_with("failed over: "))
        .expect("a failed-over line");
    let mut fenced_at = vec![-1; PARTS as usize];
    for item in line
        .split("log ends: ")
        .nth(1)
        .expect("log ends")
        .trim_end_matches(')')
        .split(", ")
    {
        let (p, o) = item.split_once('@').expect("p@offset");
        fenced_at[p.parse::<usize>().expect("partition")] = o.parse().expect("offset");
    }
    let acked = judge(pair, &fenced_at);
    eprintln!(
        "switchover in one run: {} ms, with a Java and a librdkafka producer writing; \
         {acked} records acknowledged, 0 lost",
        took.as_millis()
    );
}

/// From Apache Kafka: refused while the source is written (nothing fails over), then, with
/// the producer stopped, the quiet check passes and every topic fails over at the source's
/// end offsets, log-equal, writable on kmirror.
#[test]
fn switchover_from_kafka_needs_a_quiet_source_and_fails_over_at_its_end_offsets() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let src = kafka.bootstrap();
    let node = KmirrorNode::start();
    let dst = node.addr();
    let (topic, parts) = ("sw", 2);
    kafka.create_topic(topic, parts, &[]);
    mirror::create(&dst, "dr", &src, mirror::FAST);
    mirror::add_topics(&dst, "dr", &[topic]);

    let no_quiet = switchover(&dst, &["dr", "--all"], None);
    assert!(
        !no_quiet.status.success() && no_quiet.stderr.contains("--quiet-ms"),
        "a Kafka source needs --quiet-ms"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let stop = dir.path().join("stop");
    let writer = producer(&src, topic, parts, 200, &stop);
    proc::wait_for(Duration::from_secs(60), "records mirrored", || {
        mirror::bounds(&dst, topic, parts)
            .ok()
            .filter(|b| b.iter().all(|(_, e)| *e > 20))
            .map(|_| ())
    });
    let busy = switchover(&dst, &["dr", "--all", "--quiet-ms", "1500"], None);
    assert!(
        !busy.status.success() && busy.stderr.contains("still being written"),
        "a written source must be refused"
    );
    assert!(mirror::describe(&dst, Some("dr"))
        .iter()
        .all(|r| r.state == "MIRRORING"));

    std::fs::write(&stop, b"").expect("stop file");
    let (status, lines) = writer.wait(Duration::from_secs(120));
    assert!(status.success());
    let (acks, errors) = acked(&lines);
    assert_eq!(errors, 0);
    let ran = switchover(&dst, &["dr", "--all", "--quiet-ms", "1500"], None);
    assert!(
        ran.status.success(),
        "switchover failed:\n{}{}",
        ran.stdout,
        ran.stderr
    );
    assert!(ran.stdout.contains("holds every record"), "{}", ran.stdout);
    let src_ends = mirror::end_offsets(&src, topic, parts);
    mirror::assert_log_equal(&src, &dst, topic, &src_ends);
    assert_acked_at_their_offsets(&dst, topic, parts, &acks);
    assert!(mirror::describe(&dst, Some("dr"))
        .iter()
        .all(|r| r.state == "STOPPED"));
    assert_eq!(
        produce_code(&dst, topic, 0),
        0,
        "writable after the switchover"
    );
}

/// The switchover's proof that nothing is lost: if the old source holds records the new
/// primary lacks (here: the fence lifted by hand, a record written after the failover, the
/// fence put back),
/// it stops before the old source follows, truncating nothing; `reverse` then names and
/// takes the truncation.
#[test]
fn switchover_refuses_to_truncate_records_written_to_the_source_behind_its_back() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(KmirrorNode::start);
        let b = s.spawn(KmirrorNode::start);
        (a.join().expect("a"), b.join().expect("b"))
    });
    let (aa, ba) = (a.addr(), b.addr());
    let topic = "ledger";
    let mut c = WireClient::connect(&aa).expect("connect a");
    assert_eq!(c.create_topic(topic, 1, 1, &[]).expect("create"), 0);
    for i in 0..20u8 {
        let (err, _) = c
            .produce_raw(topic, 0, records::batch(&[&[i; 10]], 1), -1)
            .expect("produce");
        assert_eq!(err, 0);
    }
    drop(c);
    mirror::create(&ba, "dr", &aa, mirror::FAST);
    mirror::add_topics(&ba, "dr", &[topic]);
    mirror::wait_caught_up(&aa, &ba, topic, 1, false, Duration::from_secs(60));

    switchover_until(&ba, "failed-over");
    // Behind the switchover's back: the fence lifted with Kafka's own tool, one record
    // written to the old source.
    let lift = java::run_tool(
        "kafka.admin.ConfigCommand",
        &[
            "--bootstrap-server",
            &aa,
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--alter",
            "--delete-config",
            FENCE,
        ],
        Duration::from_secs(90),
    );
    assert!(
        lift.status.success(),
        "kafka-configs: {}{}",
        lift.stdout,
        lift.stderr
    );
    assert_eq!(produce_code(&aa, topic, 0), 0);
    assert_eq!(mirror::set_topic_configs(&aa, topic, &[(FENCE, "dr")]), 0);
    let a_end = mirror::end_offsets(&aa, topic, 1);

    let ran = switchover(&ba, &["dr", "--all"], None);
    assert!(
        !ran.status.success() && ran.stderr.contains("records the new primary lacks"),
        "the switchover must refuse to truncate"
    );
    assert_eq!(mirror::end_offsets(&aa, topic, 1), a_end, "A was truncated");
    assert!(
        !mirror::cli_ok(&aa, &["describe", "dr"])
            .stdout
            .contains(topic),
        "A follows B although that truncates"
    );
    // `reverse` takes it, saying so.
    let rev = mirror::cli(&ba, &["reverse", "dr"]);
    assert!(rev.status.success(), "reverse failed: {}", rev.stderr);
    assert!(rev.stdout.contains("1 records truncated"), "{}", rev.stdout);
    proc::wait_for(Duration::from_secs(60), "A's partition MIRRORING", || {
        let rows = mirror::describe(&aa, Some("dr"));
        (rows.len() == 1 && rows[0].state == "MIRRORING").then_some(())
    });
    let ends = mirror::wait_caught_up(&ba, &aa, topic, 1, false, Duration::from_secs(60));
    mirror::assert_log_equal(&ba, &aa, topic, &ends);
}
