//! In-cluster partition replication on a broker core, both sides: which role this node has
//! for each replicated partition the core owns, the leader's ISR changes, and the follower's
//! fetchers ([`follower`]). The node starts both on every core; nothing else does.
//!
//! Owns: one task per core ([`run`]) that (1) applies the published assignments to the
//! core's partitions (become leader / follower / alone: a diff on every metadata version,
//! woken by the publish, and again every second for partitions opened since), and (2) runs Kafka's isr-expiration
//! check every `replica.lag.time.max.ms / 2` on the partitions the core leads. ISR changes
//! (shrinks from here, expansions found by the Fetch handler) go to the controller as
//! `MetadataCommand::AlterPartition` ([`propose_isr_change`]) and are applied to the
//! partition only once committed.
//!
//! The follower side reads the roles set here from the partitions, never the other way
//! round. Invariants: partitions are only touched in jobs on
//! their owning core; no lock and no blocking call on the core; one ISR change per partition
//! in flight (the partition holds it as pending).

pub(crate) mod follower;

use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::ResponseError as E;
use kmirror_control::metadata::{ClusterMetadata, TopicMeta};
use kmirror_control::quorum::command::MetadataCommand;
use kmirror_engine::{now_ms, IsrChange, Router, Shard};
use kmirror_types::{LeaderEpoch, NodeId, TopicPartition};

use crate::broker::Ctx;
use crate::cluster::Cluster;
use crate::errors;

/// How often roles are re-applied without a metadata change (partitions opened lazily).
const RESYNC: Duration = Duration::from_secs(1);
/// How often the task looks for a new metadata version without being woken by a publish.
const POLL: Duration = Duration::from_millis(100);

/// The per-core replication task; ends when the engine stops.
pub(crate) async fn run(ctx: Rc<Ctx>) {
    let mut applied = u64::MAX;
    let mut last_sync = std::time::Instant::now();
    let lag = ctx.config().replica_lag_time_max_ms.max(2);
    let check_every = Duration::from_millis((lag / 2) as u64);
    let mut last_check = std::time::Instant::now();
    // Whether any topic has assignments, per metadata version (one-node mode: never, and then
    // this task does nothing but look at the version).
    let mut replicated = (u64::MAX, false);
    // Woken by every metadata publish, so a committed ISR or leader change reaches the
    // partitions within a scheduling round, not a poll period.
    let published = ctx.cluster().view().watch();
    while !ctx.core.stop.is_stopped() {
        let meta = ctx.meta();
        if replicated.0 != meta.version {
            replicated = (
                meta.version,
                meta.topics.values().any(|t| !t.assignments.is_empty()),
            );
        }
        let replicated = replicated.1;
        if replicated && (meta.version != applied || last_sync.elapsed() >= RESYNC) {
            applied = meta.version;
            last_sync = std::time::Instant::now();
            let (core, node, router) = (ctx.core.core, ctx.node_id(), ctx.router().clone());
            let m = meta.clone();
            if let Err(e) = ctx
                .router()
                .run_on(core, move |s| apply_roles(s, &m, node, lag, &router))
                .await
            {
                tracing::warn!(error = %e, "applying replica roles");
            }
        }
        if replicated && last_check.elapsed() >= check_every {
            last_check = std::time::Instant::now();
            isr_expiration(&ctx).await;
        }
        futures_lite::future::or(
            futures_lite::future::or(
                async {
                    glommio::timer::sleep(POLL).await;
                },
                async {
                    let _ = published.recv_async().await;
                },
            ),
            ctx.core.stop.stopped(),
        )
        .await;
    }
}

/// Sets the role of every replicated partition this core owns from the assignments.
/// Partitions of topics without assignments (one-node mode) stay alone, untouched.
pub(crate) fn apply_roles(
    shard: &mut Shard,
    meta: &ClusterMetadata,
    node: i32,
    lag: i64,
    router: &Router,
) {
    let now = now_ms();
    for t in meta.topics.values().filter(|t| !t.assignments.is_empty()) {
        for p in 0..t.partition_count() {
            let tp = TopicPartition::new(t.name.clone(), p);
            if router.owner(&tp) != shard.core() {
                continue;
            }
            let Some(a) = t.assignment(p, node) else {
                continue;
            };
            if !a.replicas.contains(&node) {
                continue;
            }
            let epoch = LeaderEpoch(t.leader_epochs[p as usize]);
            let part = match shard.partition(&tp) {
                Ok(part) => part,
                Err(e) => {
                    tracing::warn!(%tp, error = %e, "cannot open replica");
                    continue;
                }
            };
            if a.leader == node {
                if a.replicas.len() == 1 {
                    part.become_alone(epoch);
                } else {
                    let replicas: Vec<NodeId> = a.replicas.iter().map(|r| NodeId(*r)).collect();
                    let isr: BTreeSet<NodeId> = a.isr.iter().map(|r| NodeId(*r)).collect();
                    part.become_leader(
                        NodeId(node),
                        epoch,
                        &replicas,
                        isr,
                        a.partition_epoch,
                        lag,
                        crate::handlers::produce::min_insync_replicas(t),
                        now,
                    );
                }
            } else {
                // No leader (-1) is followed too: the fetcher waits for one.
                part.become_follower(NodeId(a.leader), epoch);
            }
        }
    }
}

async fn isr_expiration(ctx: &Rc<Ctx>) {
    let now = now_ms();
    let changes = ctx
        .router()
        .run_on(ctx.core.core, move |s| {
            let mut out = Vec::new();
            for p in s.open_partitions() {
                if let Some((change, pe)) = p.isr_expiration(now) {
                    out.push((p.tp.clone(), change, p.leader_epoch.get(), pe));
                }
            }
            out
        })
        .await
        .unwrap_or_default();
    for (tp, change, le, pe) in changes {
        tracing::info!(%tp, ?change, "shrinking the ISR");
        propose_isr_change(ctx, tp, change, le, pe);
    }
}

/// Sends an ISR change to the controller in the background and applies it to the partition
/// once committed (or clears the pending change when refused, so it is proposed again).
pub(crate) fn propose_isr_change(
    ctx: &Ctx,
    tp: TopicPartition,
    change: IsrChange,
    leader_epoch: i32,
    partition_epoch: i32,
) {
    let isr = match &change {
        IsrChange::Expand(s) | IsrChange::Shrink(s) => s.iter().map(|n| n.0).collect(),
    };
    let cmd = MetadataCommand::AlterPartition {
        name: tp.topic.clone(),
        partition: tp.partition,
        broker: ctx.node_id(),
        leader_epoch,
        partition_epoch,
        isr,
    };
    let cluster = ctx.cluster().clone();
    let router = ctx.router().clone();
    let node = ctx.node_id();
    let task = async move {
        let result = send_alter_partition(&cluster, cmd).await;
        let tp2 = tp.clone();
        let applied = router
            .with_partition(tp, move |p| match result {
                Ok(t) => match t.assignment(tp2.partition, node) {
                    // The change completed a reassignment that moved the leadership away
                    // (Kafka answers NEW_LEADER_ELECTED): stop leading at once.
                    Some(a) if a.leader != node => {
                        p.isr_change_failed();
                        let epoch = t.leader_epochs[tp2.partition as usize];
                        p.become_follower(NodeId(a.leader), kmirror_types::LeaderEpoch(epoch));
                        Ok(())
                    }
                    Some(a) => {
                        let isr = a.isr.iter().map(|r| NodeId(*r)).collect();
                        p.isr_committed(isr, a.partition_epoch, now_ms());
                        Ok(())
                    }
                    None => {
                        p.isr_change_failed();
                        Err(errors::code(E::UnknownTopicOrPartition))
                    }
                },
                Err(code) => {
                    p.isr_change_failed();
                    Err(code)
                }
            })
            .await;
        match applied {
            Ok(Ok(())) => {}
            Ok(Err(code)) => tracing::info!(code, "AlterPartition refused"),
            Err(e) => tracing::warn!(error = %e, "applying an AlterPartition answer"),
        }
    };
    glommio::spawn_local(task).detach();
}

/// The one place AlterPartition goes out: proposed to the controller (the Raft log in a
/// cluster; the local store, with the same apply function, on one node, where no ISR change
/// arises since every partition is alone). Returns the topic as committed, or Kafka's code
/// for the refusal.
async fn send_alter_partition(cluster: &Cluster, cmd: MetadataCommand) -> Result<TopicMeta, i16> {
    cluster
        .propose_topic(cmd)
        .await
        .map_err(|e| errors::propose_failure_code(&e))
}
