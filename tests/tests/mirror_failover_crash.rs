//! Issue 5: the process is killed at each durable failover step (`KMIRROR_FAILPOINT` makes
//! kmirror abort right after the step, with no cleanup, as SIGKILL would) and restarted
//! without the failpoint: recovery completes the failover by itself, exactly once: one epoch
//! bump above the mirrored epochs, one MIRROR_PID_RESET record right at the stop LSO, data
//! below the LSO log-equal with the source, and the topic is writable.

use std::time::Duration;

use kmirror_tests::java;
use kmirror_tests::mirror;
use kmirror_tests::oracle::read_batches;
use kmirror_tests::proc;
use kmirror_tests::records::{self, is_control, layout};
use kmirror_tests::wire::be_i32;
use kmirror_tests::{KafkaCluster, KmirrorNode, WireClient};

/// Failover steps in order, as named by kmirror's failpoint module.
const STEPS: &[&str] = &[
    "after_state_stopping",
    "after_fetchers_stopped",
    "after_epoch_bump",
    "after_truncate",
    "after_lme",
    "after_pid_reset_append",
    "after_pid_reset",
];

/// kmirror's MIRROR_PID_RESET control record type ("KM").
const MIRROR_PID_RESET: i16 = 0x4B4D;

/// Zigzag varint at `*at`, advancing it.
fn varint(b: &[u8], at: &mut usize) -> i64 {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The control type (key bytes 2..4) of the first record of an uncompressed control batch.
fn control_type(batch: &[u8]) -> i16 {
    let mut at = layout::RECORDS;
    let _len = varint(batch, &mut at);
    at += 1; // attributes
    let _ts = varint(batch, &mut at);
    let _off = varint(batch, &mut at);
    let key_len = varint(batch, &mut at);
    assert!(key_len >= 4, "control record key of {key_len} bytes");
    i16::from_be_bytes([batch[at + 2], batch[at + 3]])
}

fn produce_source(src: &str, topic: &str, parts: i32) {
    // Two transactions, the second aborted, then plain idempotent records.
    let ran = proc::run_ok(
        java::program("TxnProducer").args([
            src,
            topic,
            &parts.to_string(),
            "2",
            "10",
            "2",
            "false",
        ]),
        Duration::from_secs(120),
    );
    assert!(
        ran.stdout.lines().any(|l| l.starts_with("ABORTED")),
        "TxnProducer aborted no transaction on {topic}:\n{}",
        ran.stdout
    );
    let ran = proc::run(
        java::program("SeqProducer").args([src, topic, &parts.to_string(), "100"]),
        Duration::from_secs(120),
    );
    let acks = ran.stdout.lines().filter(|l| l.starts_with("ACK ")).count();
    assert_eq!(acks, 100, "SeqProducer on {topic}:\n{}", ran.stderr);
}

/// For every failover step: crash right after it, restart without the failpoint, and check
/// the failover completed exactly once.
#[test]
fn sigkill_at_each_failover_step_then_restart_completes_the_failover_exactly_once() {
    let _heavy = kmirror_tests::heavy_test_lock();
    let kafka = KafkaCluster::single();
    let src = kafka.bootstrap();
    let parts = 2;
    let topics: Vec<String> = STEPS
        .iter()
        .map(|s| format!("crash-{}", s.replace('_', "-")))
        .collect();
    for t in &topics {
        kafka.create_topic(t, parts, &[]);
        produce_source(&src, t, parts);
    }

    for (step, topic) in STEPS.iter().zip(&topics) {
        let mut node = KmirrorNode::builder()
            .env(&[("KMIRROR_FAILPOINT", step)])
            .start();
        let dst = node.addr();
        mirror::create(
            &dst,
            "dr",
            &src,
            &[
                ("mirror.metadata.sync.interval.ms", "1000"),
                ("mirror.retry.backoff.ms", "100"),
                ("mirror.retry.backoff.max.ms", "1000"),
            ],
        );
        mirror::add_topics(&dst, "dr", &[topic.as_str()]);
        let lso = mirror::wait_caught_up(&src, &dst, topic, parts, true, Duration::from_secs(60));
        let max_mirrored: Vec<i32> = (0..parts)
            .map(|p| {
                let (_, batches) = read_batches(&dst, topic, p, lso[p as usize]).expect("read");
                batches
                    .iter()
                    .map(|b| be_i32(&b.bytes, layout::LEADER_EPOCH))
                    .max()
                    .expect("mirrored batches")
            })
            .collect();

        let ran = mirror::remove_topics(&dst, "dr", &[topic.as_str()]);
        proc::wait_for(
            Duration::from_secs(30),
            &format!("kmirror to die at {step}"),
            || (!node.alive()).then_some(()),
        );
        assert!(
            !ran.status.success(),
            "{step}: remove reported success although the node died:\n{}",
            ran.stdout
        );
        let log = std::fs::read_to_string(node.log_path()).expect("node log");
        assert!(
            log.contains(&format!("aborting after {step}")),
            "{step}: the node died but not at its failpoint:\n{}",
            proc::tail(&node.log_path(), 30)
        );

        node.kill_now(); // reaps the dead process
        node.set_env(&[]);
        node.start_again();
        proc::wait_for(
            Duration::from_secs(60),
            &format!("{step}: failover completed after restart"),
            || {
                let rows = mirror::describe(&dst, Some("dr"));
                let ours: Vec<_> = rows.iter().filter(|r| &r.topic == topic).collect();
                (ours.len() == parts as usize && ours.iter().all(|r| r.state == "STOPPED"))
                    .then_some(())
            },
        );

        mirror::assert_log_equal(&src, &dst, topic, &lso);
        let end = mirror::end_offsets(&dst, topic, parts);
        for p in 0..parts {
            let i = p as usize;
            assert_eq!(
                end[i],
                lso[i] + 1,
                "{step} {topic}-{p}: log end after failover vs stop LSO {}",
                lso[i]
            );
            let (_, batches) = read_batches(&dst, topic, p, end[i]).expect("read");
            let tail: Vec<_> = batches.iter().filter(|b| b.last_offset >= lso[i]).collect();
            assert_eq!(
                tail.len(),
                1,
                "{step} {topic}-{p}: batches at/after the LSO: {:?}",
                tail.iter().map(|b| b.base_offset).collect::<Vec<_>>()
            );
            let reset = tail[0];
            assert!(
                is_control(&reset.bytes) && reset.base_offset == lso[i],
                "{step} {topic}-{p}: the last batch is not a control batch at the LSO"
            );
            assert_eq!(
                control_type(&reset.bytes),
                MIRROR_PID_RESET,
                "{step} {topic}-{p}: control type of the last record"
            );
            assert_eq!(
                be_i32(&reset.bytes, layout::LEADER_EPOCH),
                max_mirrored[i] + 1,
                "{step} {topic}-{p}: the PID reset must be written at exactly one epoch above the mirrored ones"
            );

            // Writable, at the bumped epoch.
            let mut c = WireClient::connect_leader(&dst, topic, p).expect("connect");
            let (err, base) = c
                .produce_raw(topic, p, records::batch(&[b"after failover"], 1), -1)
                .expect("produce");
            assert_eq!(err, 0, "{step} {topic}-{p}: produce after failover");
            assert_eq!(base, lso[i] + 1, "{step} {topic}-{p}: produced offset");
            let (_, batches) = read_batches(&dst, topic, p, base + 1).expect("read");
            let last = batches.last().expect("the produced batch");
            assert_eq!(last.base_offset, base);
            assert_eq!(
                be_i32(&last.bytes, layout::LEADER_EPOCH),
                max_mirrored[i] + 1,
                "{step} {topic}-{p}: new writes at exactly one epoch above the mirrored ones"
            );
        }
        drop(node);
    }
}
