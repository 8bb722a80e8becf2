use super::*;
use std::collections::HashSet;

fn open(dir: &Path) -> (TxnCoordinator, Vec<MarkerJob>) {
    TxnCoordinator::open(
        dir,
        TxnConfig {
            pid_block_size: 10,
            ..TxnConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn idempotent_producer_ids_never_repeat_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = HashSet::new();
    for _restart in 0..3 {
        let (mut c, _) = open(dir.path());
        for _ in 0..25 {
            let (r, job) = c.init_producer_id(None, 0, None, 0);
            let (pid, epoch) = r.unwrap();
            assert!(job.is_none());
            assert_eq!(epoch, 0);
            assert!(pid >= 0);
            assert!(seen.insert(pid), "pid {pid} handed out twice");
        }
        c.flush().unwrap();
    }
    assert_eq!(seen.len(), 75);
}

#[test]
fn transactional_init_bumps_epoch_and_fences_the_old_producer() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = open(dir.path());
    let (pid, e0) = c.init_producer_id(Some("tx"), 60_000, None, 0).0.unwrap();
    assert_eq!(e0, 0);
    let (pid2, e1) = c.init_producer_id(Some("tx"), 60_000, None, 1).0.unwrap();
    assert_eq!((pid2, e1), (pid, 1));
    // The old instance (epoch 0) is fenced.
    assert_eq!(
        c.add_partitions("tx", pid, 0, &[("t".into(), 0)], 2),
        PRODUCER_FENCED
    );
    assert_eq!(
        c.add_partitions("tx", pid + 100, 1, &[("t".into(), 0)], 2),
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        c.init_producer_id(Some("tx"), 1_000_000_000, None, 3).0,
        Err(INVALID_TRANSACTION_TIMEOUT)
    );
}

#[test]
fn commit_writes_markers_to_every_partition_then_completes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = open(dir.path());
    let (pid, epoch) = c.init_producer_id(Some("tx"), 60_000, None, 0).0.unwrap();
    let parts = [
        ("a".to_string(), 0),
        ("a".to_string(), 1),
        ("b".to_string(), 3),
    ];
    assert_eq!(c.add_partitions("tx", pid, epoch, &parts, 1), NONE);
    assert_eq!(c.add_offsets("tx", pid, epoch, "grp", 1), NONE);
    let job = c.end_txn(7, "tx", pid, epoch, true).unwrap();
    assert!(job.commit);
    assert_eq!((job.producer_id, job.producer_epoch), (pid, epoch));
    assert_eq!(job.partitions, parts.to_vec());
    assert_eq!(job.groups, vec!["grp".to_string()]);
    // While markers are in flight the producer must wait.
    assert_eq!(
        c.add_partitions("tx", pid, epoch, &parts, 2),
        CONCURRENT_TRANSACTIONS
    );
    assert_eq!(
        c.end_txn(8, "tx", pid, epoch, true),
        Err(CONCURRENT_TRANSACTIONS)
    );
    assert!(
        c.markers_written(&job, false).is_empty(),
        "failure keeps it pending"
    );
    assert_eq!(c.markers_written(&job, true), vec![(7, NONE)]);
    assert_eq!(c.state("tx").unwrap().2, TxnState::CompleteCommit);
    // A retried EndTxn(commit) succeeds, a contradicting abort does not.
    assert_eq!(c.end_txn(9, "tx", pid, epoch, true), Err(NONE));
    assert_eq!(
        c.end_txn(9, "tx", pid, epoch, false),
        Err(INVALID_TXN_STATE)
    );
}

#[test]
fn abort_job_carries_abort_and_empty_txn_cannot_end() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = open(dir.path());
    let (pid, epoch) = c.init_producer_id(Some("tx"), 60_000, None, 0).0.unwrap();
    assert_eq!(
        c.end_txn(1, "tx", pid, epoch, false),
        Err(INVALID_TXN_STATE)
    );
    assert_eq!(
        c.add_partitions("tx", pid, epoch, &[("t".into(), 0)], 1),
        NONE
    );
    let job = c.end_txn(2, "tx", pid, epoch, false).unwrap();
    assert!(!job.commit);
    assert_eq!(job.partitions, vec![("t".to_string(), 0)]);
    assert_eq!(c.markers_written(&job, true), vec![(2, NONE)]);
    assert_eq!(c.state("tx").unwrap().2, TxnState::CompleteAbort);
}

#[test]
fn reinit_during_ongoing_txn_aborts_it_with_a_bumped_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = open(dir.path());
    let (pid, epoch) = c.init_producer_id(Some("tx"), 60_000, None, 0).0.unwrap();
    assert_eq!(
        c.add_partitions("tx", pid, epoch, &[("t".into(), 0)], 1),
        NONE
    );
    let (r, job) = c.init_producer_id(Some("tx"), 60_000, None, 2);
    assert_eq!(r, Err(CONCURRENT_TRANSACTIONS));
    let job = job.expect("abort of the fenced transaction");
    assert!(!job.commit);
    assert_eq!(job.producer_epoch, epoch + 1);
    assert!(c.markers_written(&job, true).is_empty());
    let (pid2, e2) = c.init_producer_id(Some("tx"), 60_000, None, 3).0.unwrap();
    assert_eq!((pid2, e2), (pid, epoch + 2));
}

#[test]
fn timed_out_transaction_is_aborted_by_the_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = open(dir.path());
    let (pid, epoch) = c.init_producer_id(Some("tx"), 1_000, None, 0).0.unwrap();
    assert_eq!(
        c.add_partitions("tx", pid, epoch, &[("t".into(), 0)], 100),
        NONE
    );
    assert!(c.tick(1_000).is_empty());
    let jobs = c.tick(1_100);
    assert_eq!(jobs.len(), 1);
    assert!(!jobs[0].commit);
    assert_eq!(c.end_txn(1, "tx", pid, epoch, true), Err(PRODUCER_FENCED));
}

#[test]
fn prepared_transaction_is_resumed_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (pid, epoch) = {
        let (mut c, jobs) = open(dir.path());
        assert!(jobs.is_empty());
        let (pid, epoch) = c.init_producer_id(Some("tx"), 60_000, None, 0).0.unwrap();
        assert_eq!(
            c.add_partitions("tx", pid, epoch, &[("t".into(), 2)], 1),
            NONE
        );
        c.end_txn(1, "tx", pid, epoch, true).unwrap();
        c.flush().unwrap();
        (pid, epoch)
    };
    let (mut c, jobs) = open(dir.path());
    assert_eq!(jobs.len(), 1);
    assert!(jobs[0].commit);
    assert_eq!(jobs[0].partitions, vec![("t".to_string(), 2)]);
    assert_eq!((jobs[0].producer_id, jobs[0].producer_epoch), (pid, epoch));
    c.markers_written(&jobs[0], true);
    assert_eq!(c.state("tx").unwrap().2, TxnState::CompleteCommit);
    // And the next fresh pid does not collide with the transactional one.
    let (fresh, _) = c.init_producer_id(None, 0, None, 2).0.unwrap();
    assert_ne!(fresh, pid);
}
