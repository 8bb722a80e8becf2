//! Issue 5 against a real Apache Kafka 4.1.1 source (and kmirror to kmirror for failback):
//! failover with open and aborted transactions, consumer-group offset sync then failover,
//! partition and config sync (with excluded configs), and failback A -> B -> A.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kmirror_tests::clients::Client;
use kmirror_tests::helpers::start_kafka_and_kmirror;
use kmirror_tests::java;
use kmirror_tests::mirror;
use kmirror_tests::oracle::read_batches;
use kmirror_tests::proc::{self, LineChild};
use kmirror_tests::records::{is_control, layout};
use kmirror_tests::wire::be_i32;
use kmirror_tests::{KafkaCluster, KmirrorNode, WireClient};

fn fast(interval_ms: u32) -> Vec<(String, String)> {
    vec![
        (
            "mirror.metadata.sync.interval.ms".into(),
            interval_ms.to_string(),
        ),
        (
            "mirror.group.sync.interval.ms".into(),
            interval_ms.to_string(),
        ),
        ("mirror.retry.backoff.ms".into(), "100".into()),
        ("mirror.retry.backoff.max.ms".into(), "1000".into()),
    ]
}

fn create_mirror(dst: &str, name: &str, src: &str, interval_ms: u32) {
    let sets = fast(interval_ms);
    let sets: Vec<(&str, &str)> = sets.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    mirror::create(dst, name, src, &sets);
}

/// Fails over `topics` and waits until every partition is STOPPED.
fn fail_over(dst: &str, name: &str, topics: &[&str]) {
    let ran = mirror::remove_topics(dst, name, topics);
    assert!(
        ran.status.success(),
        "failover of {topics:?} failed:\n{}{}",
        ran.stdout,
        ran.stderr
    );
    proc::wait_for(
        Duration::from_secs(60),
        "failed-over partitions STOPPED",
        || {
            let rows = mirror::describe(dst, Some(name));
            let ours: Vec<_> = rows
                .iter()
                .filter(|r| topics.contains(&r.topic.as_str()))
                .collect();
            (!ours.is_empty() && ours.iter().all(|r| r.state == "STOPPED")).then_some(())
        },
    );
}

fn seq_produce(boot: &str, topic: &str, parts: i32, records: u64) -> Vec<String> {
    let ran = proc::run(
        java::program("SeqProducer").args([boot, topic, &parts.to_string(), &records.to_string()]),
        Duration::from_secs(120),
    );
    let acks = ran.stdout.lines().filter(|l| l.starts_with("ACK ")).count() as u64;
    assert_eq!(
        acks,
        records,
        "SeqProducer on {boot} {topic}: {} acks of {records}:\n{}\n{}",
        acks,
        proc::last_lines(&ran.stdout, 5),
        proc::last_lines(&ran.stderr, 10)
    );
    ran.stdout.lines().map(str::to_string).collect()
}

/// Failover while the source holds one aborted and one still-open transaction: the mirror ends
/// at the source LSO, read_committed sees neither aborted nor open-transaction records, and new
/// idempotent and transactional producers write, at leader epochs above every mirrored batch.
#[test]
fn failover_with_open_and_aborted_transactions_ends_at_the_lso_and_accepts_new_producers() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, KmirrorNode::start);
    let src = kafka.bootstrap();
    let dst = node.addr();
    let parts = 2;
    kafka.create_topic("orders", parts, &[]);
    // Transactions 0 and 2 committed, 1 and 3 aborted, then one left open.
    let mut open = LineChild::spawn(java::program("TxnProducer").args([
        src.as_str(),
        "orders",
        "2",
        "4",
        "50",
        "2",
        "true",
    ]));
    proc::wait_for(Duration::from_secs(90), "the open transaction", || {
        (open.count("OPEN") == 1).then_some(())
    });
    assert!(
        open.exited().is_none(),
        "TxnProducer must keep its transaction open"
    );
    let hw = mirror::end_offsets(&src, "orders", parts);
    let lso: Vec<i64> = (0..parts).map(|p| mirror::lso(&src, "orders", p)).collect();
    assert!(
        lso.iter().zip(hw.iter()).all(|(l, h)| l < h),
        "the open transaction must hold the LSO below the high watermark: lso {lso:?} hw {hw:?}"
    );

    create_mirror(&dst, "dr", &src, 1000);
    mirror::add_topics(&dst, "dr", &["orders"]);
    let matched =
        mirror::wait_caught_up(&src, &dst, "orders", parts, true, Duration::from_secs(60));
    assert_eq!(matched, lso);
    // Give the fetcher time to (wrongly) read past the LSO before failing over.
    std::thread::sleep(Duration::from_secs(2));
    fail_over(&dst, "dr", &["orders"]);

    // Truncated to the LSO: everything below it is log-equal, and at or above it there is at
    // most failover's own control record (MIRROR_PID_RESET), no data.
    mirror::assert_log_equal(&src, &dst, "orders", &lso);
    let after_stop = mirror::end_offsets(&dst, "orders", parts);
    for p in 0..parts as usize {
        let (_, batches) = read_batches(&dst, "orders", p as i32, after_stop[p]).expect("read");
        let tail: Vec<(i64, bool)> = batches
            .iter()
            .filter(|b| b.last_offset >= lso[p])
            .map(|b| (b.base_offset, is_control(&b.bytes)))
            .collect();
        assert!(
            tail.iter().all(|(base, control)| *control && *base >= lso[p]),
            "orders-{p}: after failover the log holds batches at/after the LSO {}: (base, control) {tail:?}",
            lso[p]
        );
        assert!(
            after_stop[p] - lso[p] <= 1,
            "orders-{p}: end {} vs LSO {}",
            after_stop[p],
            lso[p]
        );
    }
    let committed = mirror::java_dump(&dst, "orders", true, true);
    let bad: Vec<&String> = committed
        .records
        .iter()
        .filter(|r| r.contains(" A:") || r.contains(" O:"))
        .collect();
    assert!(
        bad.is_empty(),
        "read_committed on kmirror after failover: {bad:?}"
    );
    assert_eq!(
        committed.records.len(),
        2 * 50,
        "committed records after failover"
    );

    // The mirrored batches' highest leader epoch.
    let max_mirrored: Vec<i32> = (0..parts)
        .map(|p| {
            let (_, batches) = read_batches(&dst, "orders", p, lso[p as usize]).expect("read");
            batches
                .iter()
                .map(|b| be_i32(&b.bytes, layout::LEADER_EPOCH))
                .max()
                .unwrap_or(-1)
        })
        .collect();

    // New idempotent and transactional producers write successfully.
    seq_produce(&dst, "orders", parts, 200);
    let ran = proc::run_ok(
        java::program("TxnProducer").args([dst.as_str(), "orders", "2", "3", "20", "0", "false"]),
        Duration::from_secs(120),
    );
    assert_eq!(
        ran.stdout
            .lines()
            .filter(|l| l.starts_with("COMMITTED"))
            .count(),
        3,
        "transactional producer on the failed-over topic:\n{}",
        ran.stdout
    );
    for p in 0..parts {
        let (_, batches) = read_batches(
            &dst,
            "orders",
            p,
            mirror::end_offsets(&dst, "orders", parts)[p as usize],
        )
        .expect("read");
        let new: Vec<i32> = batches
            .iter()
            .filter(|b| b.base_offset >= lso[p as usize] && !is_control(&b.bytes))
            .map(|b| be_i32(&b.bytes, layout::LEADER_EPOCH))
            .collect();
        assert!(!new.is_empty(), "orders-{p}: no new batch after failover");
        assert!(
            new.iter().all(|e| *e > max_mirrored[p as usize]),
            "orders-{p}: new batches at leader epochs {new:?}, mirrored batches up to {}",
            max_mirrored[p as usize]
        );
    }
    let after = mirror::java_dump(&dst, "orders", true, true);
    assert_eq!(
        after.records.len(),
        100 + 200 + 3 * 20,
        "read_committed after new writes"
    );
    drop(open);
}

fn committed(boot: &str, group: &str, topic: &str, parts: i32) -> BTreeMap<i32, i64> {
    Client::Java.committed(boot, group, topic, parts)
}

/// A group consumes half a topic on the source and commits; the mirror syncs the offsets; after
/// failover the same group on kmirror resumes exactly there: nothing lost, nothing repeated
/// (the group was idle, so one sync interval's worth of duplicates is zero here).
#[test]
fn group_resumes_on_kmirror_at_the_synced_offset_after_failover() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, KmirrorNode::start);
    let src = kafka.bootstrap();
    let dst = node.addr();
    let parts = 2;
    kafka.create_topic("events", parts, &[]);
    seq_produce(&src, "events", parts, 20_000);
    let dir = tempfile::tempdir().expect("temp");
    let stop = dir.path().join("stop");
    let stop_s = stop.display().to_string();
    let first = LineChild::spawn(java::program("GroupConsumer").args([
        src.as_str(),
        "readers",
        "events",
        &stop_s,
        "4000",
    ]));
    proc::wait_for(Duration::from_secs(90), "half the topic consumed", || {
        (first.count("R ") >= 10_000).then_some(())
    });
    std::fs::write(&stop, b"stop").expect("stop file");
    let (status, lines) = first.wait(Duration::from_secs(60));
    assert!(status.success());
    let on_source = committed(&src, "readers", "events", parts);
    let consumed = lines.iter().filter(|l| l.starts_with("R ")).count() as i64;
    assert_eq!(
        on_source.values().sum::<i64>(),
        consumed,
        "source commits = records consumed"
    );
    assert!(consumed < 20_000, "the group must stop midway");

    create_mirror(&dst, "dr", &src, 1000);
    mirror::add_topics(&dst, "dr", &["events"]);
    let end = mirror::wait_caught_up(&src, &dst, "events", parts, false, Duration::from_secs(60));
    let synced = proc::wait_for(
        Duration::from_secs(60),
        "group offsets synced to kmirror",
        || {
            let c = committed(&dst, "readers", "events", parts);
            (c == on_source).then_some(c)
        },
    );
    fail_over(&dst, "dr", &["events"]);
    assert_eq!(
        committed(&dst, "readers", "events", parts),
        synced,
        "offsets survive failover"
    );

    std::fs::remove_file(&stop).expect("rm stop");
    let second = LineChild::spawn(java::program("GroupConsumer").args([
        dst.as_str(),
        "readers",
        "events",
        &stop_s,
        "0",
    ]));
    let rest = 20_000 - consumed as usize;
    proc::wait_for(
        Duration::from_secs(90),
        "the rest consumed on kmirror",
        || (second.count("R ") >= rest).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&stop, b"stop").expect("stop file");
    let (status, lines) = second.wait(Duration::from_secs(60));
    assert!(status.success());
    let mut per: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for l in lines.iter().filter(|l| l.starts_with("R ")) {
        let c: Vec<&str> = l.split_whitespace().collect();
        per.entry(c[1].parse().expect("p"))
            .or_default()
            .push(c[2].parse().expect("offset"));
    }
    for p in 0..parts {
        let got = per.remove(&p).unwrap_or_default();
        let want: Vec<i64> = (synced[&p]..end[p as usize]).collect();
        assert_eq!(
            got.first(),
            want.first(),
            "events-{p}: the group resumed at a different offset than the synced {}",
            synced[&p]
        );
        assert_eq!(
            got, want,
            "events-{p}: records lost or repeated after failover"
        );
    }
}

/// Partition expansion and a config change on the source reach kmirror within one sync
/// interval; an excluded config (message.timestamp.type, seed 003's default list) does not.
#[test]
fn partition_expansion_and_config_changes_reach_kmirror_within_one_sync_interval_excluded_do_not() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, KmirrorNode::start);
    let src = kafka.bootstrap();
    let dst = node.addr();
    kafka.create_topic("grow", 2, &[("retention.ms", "3600000")]);
    seq_produce(&src, "grow", 2, 1000);
    let interval_ms = 3000;
    create_mirror(&dst, "dr", &src, interval_ms);
    mirror::add_topics(&dst, "dr", &["grow"]);
    mirror::wait_caught_up(&src, &dst, "grow", 2, false, Duration::from_secs(60));
    assert_eq!(
        mirror::topic_configs(&dst, "grow").get("retention.ms"),
        Some(&Some("3600000".to_string()))
    );

    assert_eq!(mirror::create_partitions(&src, "grow", 4), 0);
    assert_eq!(
        mirror::set_topic_configs(
            &src,
            "grow",
            &[
                ("retention.ms", "7200000"),
                ("message.timestamp.type", "LogAppendTime"),
            ]
        ),
        0
    );
    let changed = Instant::now();
    let budget = Duration::from_millis(u64::from(interval_ms) + 2000);
    let took = proc::wait_for(budget, "partitions and retention.ms synced", || {
        let cfg = mirror::topic_configs(&dst, "grow");
        (mirror::partition_count(&dst, "grow") == 4
            && cfg.get("retention.ms") == Some(&Some("7200000".to_string())))
        .then(|| changed.elapsed())
    });
    eprintln!(
        "partition expansion and config change synced {:.1} s after the change (interval {interval_ms} ms)",
        took.as_secs_f64()
    );
    // A few more rounds: the excluded key must never arrive.
    std::thread::sleep(Duration::from_millis(u64::from(interval_ms) * 2));
    let cfg = mirror::topic_configs(&dst, "grow");
    assert_ne!(
        cfg.get("message.timestamp.type"),
        Some(&Some("LogAppendTime".to_string())),
        "an excluded config was synced"
    );
    // The new partitions mirror too.
    seq_produce(&src, "grow", 4, 2000);
    mirror::assert_mirrored(&src, &dst, "grow", 4, Duration::from_secs(60));
}

/// Failback between two kmirror nodes: A -> B mirroring, fail over to B, write on B while A
/// gets records B never saw; then mirror B -> A: A truncates exactly its divergent tail and
/// ends log-equal with B; finally fail over back to A, which accepts writes.
#[test]
fn failback_a_to_b_to_a_truncates_only_the_divergent_tail_and_ends_log_equal() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(KmirrorNode::start);
        let b = s.spawn(KmirrorNode::start);
        (a.join().expect("a"), b.join().expect("b"))
    });
    let (aa, ba) = (a.addr(), b.addr());
    let parts = 2;
    let mut c = WireClient::connect(&aa).expect("connect a");
    assert_eq!(c.create_topic("fb", parts, 1, &[]).expect("create"), 0);
    seq_produce(&aa, "fb", parts, 4000);

    create_mirror(&ba, "from-a", &aa, 1000);
    mirror::add_topics(&ba, "from-a", &["fb"]);
    let common = mirror::wait_caught_up(&aa, &ba, "fb", parts, false, Duration::from_secs(60));
    mirror::assert_log_equal(&aa, &ba, "fb", &common);

    // Disaster: fail over to B, write there; A (still up) takes writes B never gets.
    fail_over(&ba, "from-a", &["fb"]);
    seq_produce(&ba, "fb", parts, 1000);
    seq_produce(&aa, "fb", parts, 600);
    let a_before = mirror::end_offsets(&aa, "fb", parts);
    assert!(a_before.iter().zip(common.iter()).all(|(x, y)| x > y));

    // `reverse` on B (one command: A follows B for what B failed over): its dry run reports
    // what A would truncate and changes nothing, then the real reverse.
    let sets: Vec<String> = fast(1000)
        .iter()
        .flat_map(|(k, v)| ["--reverse-set".to_owned(), format!("{k}={v}")])
        .collect();
    let reverse = |dry: bool| {
        let mut args = vec!["reverse", "from-a", "--reverse-name", "from-b"];
        args.extend(sets.iter().map(String::as_str));
        if dry {
            args.push("--dry-run");
        }
        mirror::cli(&ba, &args)
    };
    let dry = reverse(true);
    eprintln!("dry run:\n{}{}", dry.stdout, dry.stderr);
    assert!(dry.status.success(), "dry run failed: {}", dry.stderr);
    assert_eq!(
        mirror::end_offsets(&aa, "fb", parts),
        a_before,
        "a dry run changed A's log"
    );
    assert!(
        !mirror::cli_ok(&aa, &["list"]).stdout.contains("from-b"),
        "a dry run created the reverse mirror"
    );
    let ran = reverse(false);
    eprintln!("reverse:\n{}{}", ran.stdout, ran.stderr);
    assert!(ran.status.success(), "reverse failed: {}", ran.stderr);
    let truncated: i64 = a_before.iter().zip(&common).map(|(a, c)| a - c).sum();
    assert!(
        ran.stdout
            .contains(&format!("{truncated} records truncated")),
        "reverse should report the {truncated} records it truncates: {}",
        ran.stdout
    );
    let b_ends = mirror::wait_caught_up(&ba, &aa, "fb", parts, false, Duration::from_secs(90));
    let reports = mirror::assert_log_equal(&ba, &aa, "fb", &b_ends);
    assert!(
        reports.iter().all(|r| r.log_start == 0),
        "failback re-copied from scratch? {reports:?}"
    );
    // The dry run named exactly the divergent tail: A's end, truncated to the common point.
    for p in 0..parts as usize {
        let row: Vec<i64> = dry
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|c| c.len() >= 5 && c[0] == "fb" && c[1] == p.to_string())
            .unwrap_or_else(|| panic!("dry run has no row for fb-{p}:\n{}", dry.stdout))[2..5]
            .iter()
            .map(|x| x.parse().expect("number"))
            .collect();
        assert_eq!(
            row,
            vec![a_before[p], common[p], a_before[p] - common[p]],
            "fb-{p}: dry run (local end, truncate to, truncated)"
        );
    }

    // Back on A: fail over, write.
    fail_over(&aa, "from-b", &["fb"]);
    seq_produce(&aa, "fb", parts, 100);
    let final_ends = mirror::end_offsets(&aa, "fb", parts);
    for p in 0..parts as usize {
        // 50 new records, after at most failover's own control record.
        let grew = final_ends[p] - b_ends[p];
        assert!(
            (50..=51).contains(&grew),
            "fb-{p}: end {} after writing 50 records on A at {}",
            final_ends[p],
            b_ends[p]
        );
    }
}

/// Whole-mirror failover through the CLI against a Kafka source: `remove --topic-regex`
/// fails over exactly the regex-joined topics it matches, `remove --all` the rest; each is
/// log-equal with the source up to where it stopped, writable on kmirror, and no topic created
/// on the source afterwards joins the mirror.
#[test]
fn remove_all_and_by_regex_fail_over_whole_groups_of_topics_and_nothing_joins_after() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--cores", "2"]).start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    for t in ["orders", "pay-eu", "pay-us"] {
        kafka.create_topic(t, 2, &[]);
        seq_produce(&src, t, 2, 200);
    }
    create_mirror(&dst, "dr", &src, 300);
    mirror::cli_ok(&dst, &["add", "dr", "--topics", "orders"]);
    mirror::cli_ok(&dst, &["add", "dr", "--topic-regex", "pay-.*"]);
    for t in ["orders", "pay-eu", "pay-us"] {
        mirror::assert_mirrored(&src, &dst, t, 2, Duration::from_secs(90));
    }
    // A topic created later on the source that the regex matches joins within a sync
    // interval (300 ms here), log-equal.
    kafka.create_topic("pay-uk", 2, &[]);
    seq_produce(&src, "pay-uk", 2, 100);
    mirror::assert_mirrored(&src, &dst, "pay-uk", 2, Duration::from_secs(60));
    let states = |topic: &str| -> Vec<String> {
        mirror::describe(&dst, Some("dr"))
            .into_iter()
            .filter(|r| r.topic == topic)
            .map(|r| r.state)
            .collect()
    };

    // The regex's topics fail over (after lag 0); orders keeps mirroring.
    mirror::cli_ok(
        &dst,
        &["remove", "dr", "--topic-regex", "pay-.*", "--wait-for-sync"],
    );
    for t in ["pay-eu", "pay-us", "pay-uk"] {
        assert_eq!(states(t), ["STOPPED", "STOPPED"], "{t}");
    }
    assert_eq!(states("orders"), ["MIRRORING", "MIRRORING"]);
    // A new source topic the regex matches does not join; orders still follows the source.
    kafka.create_topic("pay-apac", 1, &[]);
    seq_produce(&src, "orders", 2, 100);
    mirror::assert_mirrored(&src, &dst, "orders", 2, Duration::from_secs(90));

    // --all: orders fails over too, and a topic created afterwards joins nothing.
    mirror::cli_ok(&dst, &["remove", "dr", "--all", "--wait-for-sync"]);
    assert_eq!(states("orders"), ["STOPPED", "STOPPED"]);
    kafka.create_topic("orders-late", 1, &[]);
    // Several sync rounds (300 ms each).
    std::thread::sleep(Duration::from_secs(3));
    let topics: std::collections::BTreeSet<String> = mirror::describe(&dst, Some("dr"))
        .into_iter()
        .map(|r| r.topic)
        .collect();
    assert_eq!(
        topics,
        ["orders", "pay-eu", "pay-uk", "pay-us"]
            .into_iter()
            .map(String::from)
            .collect(),
        "topics created on the source after the failover joined the mirror"
    );
    // Everything mirrored is identical at identical offsets, and writable now.
    for t in ["orders", "pay-eu", "pay-uk", "pay-us"] {
        let ends = mirror::end_offsets(&src, t, 2);
        mirror::assert_log_equal(&src, &dst, t, &ends);
        // The failover's producer-state reset marker may follow the mirrored records.
        let dst_ends = mirror::end_offsets(&dst, t, 2);
        assert!(
            dst_ends
                .iter()
                .zip(&ends)
                .all(|(d, s)| d >= s && *d <= s + 1),
            "{t}: kmirror ends {dst_ends:?}, source {ends:?}"
        );
        let acks = seq_produce(&dst, t, 2, 10);
        assert!(!acks.is_empty());
    }
}

/// `add --start latest` and `--start <ms>` against a Kafka source: the mirror log starts at
/// the source offset ListOffsets gives (its log start is that offset), copies nothing below
/// it, and from there holds the source's batches at the same offsets; a group committed
/// below that start is synced clamped to it.
#[test]
fn mirror_started_at_latest_or_a_time_copies_from_that_source_offset_only() {
    use kmirror_tests::helpers::{commit_offset, fetch_offset, now_ms};
    use kmirror_tests::oracle::log_equal_from_destination_start;
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--cores", "1"]).start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("history", 1, &[]);
    kafka.create_topic("recent", 1, &[]);
    seq_produce(&src, "history", 1, 200);
    seq_produce(&src, "recent", 1, 100);
    std::thread::sleep(Duration::from_millis(50));
    let since = now_ms();
    std::thread::sleep(Duration::from_millis(50));
    seq_produce(&src, "recent", 1, 100);
    let from_time = WireClient::connect(&src)
        .unwrap()
        .list_offset("recent", 0, since)
        .unwrap();
    assert_eq!(
        from_time, 100,
        "the source's first record at or after the time"
    );
    commit_offset(&src, "readers", "history", 5);

    create_mirror(&dst, "dr", &src, 300);
    mirror::cli_ok(
        &dst,
        &["add", "dr", "--topics", "history", "--start", "latest"],
    );
    mirror::cli_ok(
        &dst,
        &[
            "add",
            "dr",
            "--topics",
            "recent",
            "--start",
            &since.to_string(),
        ],
    );
    let bounds = |t: &str| WireClient::connect(&dst).ok()?.log_bounds(t, 0).ok();
    proc::wait_for(Duration::from_secs(60), "history placed at latest", || {
        (bounds("history") == Some((200, 200))).then_some(())
    });
    // Produced after the mirror started: copied.
    seq_produce(&src, "history", 1, 50);
    for (t, start) in [("history", 200), ("recent", 100)] {
        let ends = mirror::wait_caught_up(&src, &dst, t, 1, false, Duration::from_secs(90));
        let report = log_equal_from_destination_start(&src, &dst, t, 0, ends[0])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.log_start, start, "{t}: mirror log start");
        assert!(report.batches > 0, "{t}: nothing compared");
        assert_eq!(bounds(t), Some((start, ends[0])), "{t}: kmirror's bounds");
    }
    // The group's offset 5 is below the mirror's log start: synced as 200.
    proc::wait_for(Duration::from_secs(30), "group offset clamped", || {
        (fetch_offset(&dst, "readers", "history") == 200).then_some(())
    });
}

/// `remove --wait-for-sync` is the broker's check against the source's last stable offsets
/// read after the request arrived: a paused topic the source has moved past is refused with
/// REQUEST_TIMED_OUT at the sync timeout and nothing fails over;
/// a throttled topic still catching up fails over only once it holds everything the source
/// had when the request arrived, and the answer says where each partition's log ends.
#[test]
fn wait_for_sync_fails_over_only_after_everything_committed_before_the_request_is_mirrored() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--cores", "1"]).start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("ledger", 1, &[]);
    kafka.create_topic("idle", 1, &[]);
    seq_produce(&src, "idle", 1, 100);
    create_mirror(&dst, "dr", &src, 300);
    mirror::cli_ok(&dst, &["add", "dr", "--topics", "idle"]);
    mirror::assert_mirrored(&src, &dst, "idle", 1, Duration::from_secs(90));

    // Paused while the source goes on: it cannot catch up, so the wait times out.
    mirror::cli_ok(&dst, &["pause", "dr", "--topics", "idle"]);
    seq_produce(&src, "idle", 1, 10);
    let started = Instant::now();
    let ran = mirror::cli(
        &dst,
        &[
            "remove",
            "dr",
            "--topics",
            "idle",
            "--wait-for-sync",
            "--sync-timeout-ms",
            "2000",
        ],
    );
    assert!(!ran.status.success(), "{}", ran.stdout);
    assert!(
        ran.stderr.contains("REQUEST_TIMED_OUT") && ran.stderr.contains("idle-0"),
        "{}",
        ran.stderr
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
    let states: Vec<String> = mirror::describe(&dst, Some("dr"))
        .into_iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(states, ["PAUSED"], "nothing failed over");

    // Removed right after it was added, before the mirror created it here: the wait covers
    // the creation too (not UNKNOWN_TOPIC_OR_PARTITION); a topic the source does not have
    // yet times out naming it, and fails over once it exists and is mirrored.
    mirror::cli_ok(&dst, &["add", "dr", "--topics", "late"]);
    let ran = mirror::cli(
        &dst,
        &[
            "remove",
            "dr",
            "--topics",
            "late",
            "--wait-for-sync",
            "--sync-timeout-ms",
            "1500",
        ],
    );
    assert!(!ran.status.success(), "{}", ran.stdout);
    assert!(
        ran.stderr.contains("REQUEST_TIMED_OUT") && ran.stderr.contains("not yet created"),
        "{}",
        ran.stderr
    );
    kafka.create_topic("late", 1, &[]);
    seq_produce(&src, "late", 1, 50);
    mirror::cli_ok(
        &dst,
        &["remove", "dr", "--topics", "late", "--wait-for-sync"],
    );
    mirror::assert_log_equal(&src, &dst, "late", &[50]);

    // Throttled catch-up: the request waits for it.
    mirror::cli_ok(
        &dst,
        &["alter", "dr", "--set", "mirror.throttled.rate=150000"],
    );
    seq_produce(&src, "ledger", 1, 20_000);
    let committed = mirror::end_offsets(&src, "ledger", 1);
    mirror::cli_ok(&dst, &["add", "dr", "--topics", "ledger"]);
    let ran = mirror::cli_ok(
        &dst,
        &[
            "remove",
            "dr",
            "--topics",
            "ledger",
            "--wait-for-sync",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("json");
    assert_eq!(v[0]["topic"], "ledger", "{v}");
    let stopped = v[0]["stopped_at"]["0"].as_i64().expect("stopped_at");
    assert!(
        stopped >= committed[0],
        "failed over at {stopped}, before the {} records committed before the request",
        committed[0]
    );
    mirror::assert_log_equal(&src, &dst, "ledger", &committed);
}

/// Failback to following an Apache Kafka source, through the CLI: mirror, fail over, write on
/// kmirror while Kafka takes writes too, then `add` the topic back. The dry run names the
/// divergent tail; the real `add` truncates exactly that tail and copies only what Kafka
/// wrote after the failover (bytes mirrored measured against the tail's size); the logs end
/// log-equal.
#[test]
fn failback_to_a_kafka_source_truncates_the_divergent_tail_and_recopies_only_kafkas_new_tail() {
    use kmirror_tests::oracle::read_batches;
    let _heavy = kmirror_tests::heavy_test_lock();
    let maddr = format!("127.0.0.1:{}", proc::free_port());
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder()
            .args(&["--cores", "1", "--metrics", &maddr])
            .start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("orders", 1, &[]);
    seq_produce(&src, "orders", 1, 2_000);
    create_mirror(&dst, "dr", &src, 300);
    mirror::add_topics(&dst, "dr", &["orders"]);
    mirror::assert_mirrored(&src, &dst, "orders", 1, Duration::from_secs(90));
    let common = mirror::end_offsets(&src, "orders", 1)[0];

    // Fail over; both sides take writes.
    fail_over(&dst, "dr", &["orders"]);
    seq_produce(&dst, "orders", 1, 500);
    seq_produce(&src, "orders", 1, 300);
    let diverged = mirror::end_offsets(&dst, "orders", 1)[0];
    let kafka_end = mirror::end_offsets(&src, "orders", 1)[0];
    assert!(diverged > common && kafka_end > common);
    let bytes = |m: &kmirror_tests::metrics::Scrape| {
        m.value(
            "kmirror_mirror_partition_bytes_total",
            &[("mirror", "dr"), ("topic", "orders"), ("partition", "0")],
        )
        .unwrap_or(0.0)
    };
    let copied_before = bytes(&kmirror_tests::metrics::scrape(&maddr));

    // The dry run names the tail: local end, truncate to, truncated.
    let dry = mirror::cli_ok(&dst, &["add", "dr", "--topics", "orders", "--dry-run"]);
    let row: Vec<i64> = dry
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.len() >= 5 && c[0] == "orders" && c[1] == "0")
        .unwrap_or_else(|| panic!("no dry-run row:\n{}", dry.stdout))[2..5]
        .iter()
        .map(|x| x.parse().expect("number"))
        .collect();
    assert_eq!(
        row,
        vec![diverged, common, diverged - common],
        "{}",
        dry.stdout
    );
    assert_eq!(
        mirror::end_offsets(&dst, "orders", 1)[0],
        diverged,
        "dry run changed the log"
    );

    // Failback: kmirror follows Kafka again.
    mirror::add_topics(&dst, "dr", &["orders"]);
    let ends = mirror::wait_caught_up(&src, &dst, "orders", 1, false, Duration::from_secs(90));
    assert_eq!(ends, vec![kafka_end]);
    let reports = mirror::assert_log_equal(&src, &dst, "orders", &ends);
    assert_eq!(reports[0].log_start, 0, "re-copied from scratch?");
    // Exactly Kafka's new tail was copied: the bytes of its batches above the common point.
    let (_, batches) = read_batches(&src, "orders", 0, kafka_end).expect("source batches");
    let tail: u64 = batches
        .iter()
        .filter(|b| b.base_offset >= common)
        .map(|b| b.bytes.len() as u64)
        .sum();
    let copied = bytes(&kmirror_tests::metrics::scrape(&maddr)) - copied_before;
    eprintln!(
        "failback: {} records truncated, {} bytes re-copied, Kafka's tail {tail} bytes",
        diverged - common,
        copied
    );
    assert_eq!(
        copied as u64, tail,
        "bytes re-copied vs the source's new tail"
    );
}

/// `kmirror mirror verify` against a Kafka source: equal on every partition after mirroring;
/// after one payload byte of a mirror segment is flipped on disk, it names that partition
/// and the damaged batch's offset (the stored bytes are re-checksummed, not trusted) and
/// fails, while the untouched partition stays equal.
#[test]
fn verify_finds_a_flipped_byte_in_a_mirror_segment() {
    use kmirror_tests::records::split_batches;
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--cores", "1"]).start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    kafka.create_topic("audit", 2, &[]);
    seq_produce(&src, "audit", 2, 3_000);
    create_mirror(&dst, "dr", &src, 300);
    mirror::add_topics(&dst, "dr", &["audit"]);
    let ends = mirror::wait_caught_up(&src, &dst, "audit", 2, false, Duration::from_secs(90));
    let ran = mirror::cli_ok(&dst, &["verify", "dr", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(ran.stdout.trim()).expect("json");
    for p in 0..2usize {
        let r = &rows[p];
        assert_eq!(r["equal"], true, "{rows}");
        assert_eq!(r["upto"].as_i64(), Some(ends[p]), "{rows}");
    }

    // Damage one payload byte of a batch in the middle of audit-1's segment, in place while
    // the node runs (a restart would re-validate the segment and re-mirror the damage away).
    let seg = node
        .data_dir()
        .join("topics")
        .join("audit-1")
        .join("00000000000000000000.log");
    let bytes = std::fs::read(&seg).expect("segment");
    let batches = split_batches(&bytes::Bytes::from(bytes.clone()));
    assert!(batches.len() > 4, "{} batches", batches.len());
    let victim = &batches[batches.len() / 2];
    let at: usize = batches[..batches.len() / 2]
        .iter()
        .map(|b| b.bytes.len())
        .sum();
    let last_byte = (at + victim.bytes.len() - 1) as u64;
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&seg)
            .expect("open segment");
        f.seek(SeekFrom::Start(last_byte)).unwrap();
        f.write_all(&[bytes[last_byte as usize] ^ 0x5a]).unwrap();
        f.sync_all().unwrap();
    }

    let ran = mirror::cli(&node.addr(), &["verify", "dr"]);
    assert!(
        !ran.status.success(),
        "verify passed a damaged mirror:\n{}",
        ran.stdout
    );
    let line = ran
        .stdout
        .lines()
        .find(|l| l.contains("DIFFERS"))
        .unwrap_or_else(|| panic!("no DIFFERS row:\n{}{}", ran.stdout, ran.stderr));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cols[..2], ["audit", "1"], "{line}");
    assert!(
        line.contains(&format!("DIFFERS at offset {}:", victim.base_offset)),
        "{line}"
    );
    assert!(
        ran.stdout
            .lines()
            .any(|l| l.starts_with("audit") && l.contains(" 0 ") && l.contains("equal")),
        "audit-0 is untouched:\n{}",
        ran.stdout
    );
    assert!(
        ran.stderr.contains("1 of 2 partitions differ"),
        "{}",
        ran.stderr
    );
}

/// Share groups (KIP-932) through a mirror: a share group that read part of a topic on the
/// Kafka source, and is idle there, is created on kmirror at the source's share-partition
/// start offsets (synced like consumer-group offsets). After failover a share consumer of
/// that group on kmirror, with no group config there (kmirror's default would start at the
/// end of the log), reads exactly the records from those start offsets on, each once:
/// nothing below them again, nothing above them missing.
#[test]
fn share_group_resumes_on_kmirror_at_the_synced_start_offsets_after_failover() {
    use kmirror_tests::share;
    let _heavy = kmirror_tests::heavy_test_lock();
    let (kafka, node) = start_kafka_and_kmirror(KafkaCluster::single, || {
        KmirrorNode::builder().args(&["--cores", "1"]).start()
    });
    let (src, dst) = (kafka.bootstrap(), node.addr());
    share::enable(&src);
    share::enable(&dst);
    kafka.create_topic("jobs", 2, &[]);
    const PER_PARTITION: i64 = 1000;
    seq_produce(&src, "jobs", 2, 2 * PER_PARTITION as u64);

    // The group reads part of the topic on the source, then leaves (Empty).
    share::set_group_configs(&src, "sg", "share.auto.offset.reset=earliest");
    let read = share::console_consume(&src, "jobs", "sg", 600, 30_000);
    assert_eq!(read.len(), 600, "the source's share consumer read 600");
    proc::wait_for(
        Duration::from_secs(60),
        "the source's share group sg has start offsets past 0",
        || {
            share::start_offsets(&src, "sg")
                .ok()
                .filter(|s| s.len() == 2 && s.values().sum::<i64>() > 0)
        },
    );

    // Mirrored: kmirror's group stands where the source's does (read again each time: the
    // source's last state write may land after the consumer left).
    create_mirror(&dst, "dr", &src, 500);
    mirror::cli_ok(&dst, &["add", "dr", "--topics", "jobs"]);
    mirror::assert_mirrored(&src, &dst, "jobs", 2, Duration::from_secs(90));
    let at_source = proc::wait_for(
        Duration::from_secs(60),
        "kmirror's share group sg at the source's start offsets",
        || {
            let here = share::start_offsets(&src, "sg").ok()?;
            (share::start_offsets(&dst, "sg").ok()? == here).then_some(here)
        },
    );
    let total: i64 = at_source.values().sum();
    eprintln!("share group sg's start offsets on the source and on kmirror: {at_source:?}");
    assert!(
        at_source.values().all(|s| (0..=PER_PARTITION).contains(s)) && total < 2 * PER_PARTITION,
        "{at_source:?}"
    );
    fail_over(&dst, "dr", &["jobs"]);
    assert_eq!(
        share::start_offsets(&dst, "sg"),
        Ok(at_source.clone()),
        "a failover leaves the synced start offsets as they were"
    );

    // The share consumer on kmirror resumes there: every record from the start offsets on,
    // once each.
    let want = (2 * PER_PARTITION - total) as usize;
    let got = share::console_consume(&dst, "jobs", "sg", want, 30_000);
    let mut seen: Vec<(i32, i64)> = got
        .iter()
        .map(|v| {
            let mut f = v.split(':');
            let p: i32 = f.next().and_then(|x| x.parse().ok()).expect("partition");
            let s: i64 = f.next().and_then(|x| x.parse().ok()).expect("seq");
            (p, s)
        })
        .collect();
    seen.sort_unstable();
    let expected: Vec<(i32, i64)> = (0..2)
        .flat_map(|p| {
            let from = at_source[&("jobs".to_owned(), p)];
            (from..PER_PARTITION).map(move |s| (p, s))
        })
        .collect();
    assert_eq!(
        seen.len(),
        expected.len(),
        "read {} of {} (start offsets {at_source:?})",
        seen.len(),
        expected.len()
    );
    assert_eq!(seen, expected, "start offsets {at_source:?}");
}
