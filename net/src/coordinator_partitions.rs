//! The coordinators' partitions on this node: which `__consumer_offsets` /
//! `__transaction_state` partitions it leads (so the coordinator thread loads them), where
//! another key's coordinator is (FindCoordinator), reading a led partition whole (a load), and
//! appending a coordinator's batches as its leader, answered once the high watermark covers
//! them ([`PartitionWriter`]), as Kafka's coordinators write with acks=all.
//!
//! Owns: [`PartitionSeat`], the node's [`CoordinatorSeat`]. Must not: run on an engine core.
//! Its calls block the coordinator thread on a core (`Router::run_on_blocking`) and on the
//! replicas' acknowledgement, never the other way round.
//!
//! Fencing: every append names the leader epoch its coordinator was loaded in; the partition
//! refuses it once the epoch moved on (another node leads, or led in between), so a deposed
//! coordinator never writes behind the new one, and its failed flush makes it load again.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kmirror_control::coordinator_partition::partition_for;
use kmirror_control::metadata::{ClusterMetadata, NO_LEADER};
use kmirror_control::quorum::{ClusterCommand, Outcome};
use kmirror_control::replicated::{CoordinatorLog, CoordinatorLogs, Loaded, PartitionWriter};
use kmirror_engine::{AckState, Router};
use kmirror_types::{LeaderEpoch, TopicPartition};

use crate::cluster::{Cluster, Role};
use crate::groups::{CoordinatorSeat, Led, Located};

/// How long an append waits for its replicas (then the coordinator is fenced and reloads).
const APPEND_TIMEOUT: Duration = Duration::from_secs(15);
/// Bytes read per step when a partition is loaded.
const READ_CHUNK: usize = 1 << 20;

fn topic(log: CoordinatorLog) -> &'static str {
    match log {
        CoordinatorLog::Offsets => "__consumer_offsets",
        CoordinatorLog::Transactions => "__transaction_state",
        CoordinatorLog::ShareState => kmirror_control::metadata::SHARE_STATE_TOPIC,
    }
}

/// The node's coordinator partitions (see the module doc).
pub struct PartitionSeat {
    engine: Arc<EngineWriter>,
    listener: String,
}

/// Reads and appends on the engine cores that own the coordinator partitions.
struct EngineWriter {
    cluster: Cluster,
    router: Arc<OnceLock<Router>>,
    node_id: i32,
}

impl PartitionSeat {
    /// `router` is set once the engine runs; until then loads and writes fail (and are
    /// retried). FindCoordinator answers with the endpoints of `listener`.
    pub fn new(
        cluster: Cluster,
        router: Arc<OnceLock<Router>>,
        node_id: i32,
        listener: String,
    ) -> PartitionSeat {
        PartitionSeat {
            engine: Arc::new(EngineWriter {
                cluster,
                router,
                node_id,
            }),
            listener,
        }
    }

    fn led_of(&self, meta: &ClusterMetadata, log: CoordinatorLog) -> Loaded {
        let Some(t) = meta.topics.get(topic(log)).filter(|t| t.internal) else {
            return Loaded::default();
        };
        let epochs = (0..t.partition_count())
            .filter(|p| {
                let tp = TopicPartition::new(t.name.clone(), *p);
                matches!(
                    self.engine.cluster.role(meta, &tp),
                    Some(Role::Leader { .. })
                )
            })
            .filter_map(|p| Some((p, *t.leader_epochs.get(usize::try_from(p).ok()?)?)))
            .collect();
        Loaded {
            partitions: t.partition_count(),
            epochs,
        }
    }

    /// Node `node`'s endpoint on this seat's listener (its first one otherwise).
    fn endpoint_of(&self, meta: &ClusterMetadata, node: i32) -> Located {
        let endpoint = meta.brokers.get(&node).and_then(|b| {
            b.endpoints
                .iter()
                .find(|e| e.name == self.listener)
                .or_else(|| b.endpoints.first())
        });
        match endpoint {
            Some(e) => Located::Elsewhere {
                node_id: node,
                host: e.host.clone(),
                port: i32::from(e.port),
            },
            None => Located::Unknown,
        }
    }
}

impl CoordinatorSeat for PartitionSeat {
    fn led(&self) -> Option<Led> {
        let meta = self.engine.cluster.snapshot();
        Some(Led {
            offsets: self.led_of(&meta, CoordinatorLog::Offsets),
            txns: self.led_of(&meta, CoordinatorLog::Transactions),
            shares: self.led_of(&meta, CoordinatorLog::ShareState),
        })
    }

    fn locate(&self, log: CoordinatorLog, key: &str) -> Located {
        let meta = self.engine.cluster.snapshot();
        let Some(t) = meta.topics.get(topic(log)).filter(|t| t.internal) else {
            return Located::Unknown;
        };
        let p = partition_for(key, t.partition_count());
        let leader = t
            .assignment(p, self.engine.node_id)
            .map_or(NO_LEADER, |a| a.leader);
        if leader == NO_LEADER {
            return Located::Unknown;
        }
        if leader == self.engine.node_id {
            return Located::Here;
        }
        self.endpoint_of(&meta, leader)
    }

    fn locate_mirror(&self) -> Located {
        let status = self.engine.cluster.quorum_status();
        let Some(leader) = status.leader.and_then(|l| i32::try_from(l).ok()) else {
            return Located::Unknown;
        };
        if leader == self.engine.node_id {
            return Located::Here;
        }
        self.endpoint_of(&self.engine.cluster.snapshot(), leader)
    }

    fn read(
        &self,
        log: CoordinatorLog,
        partition: i32,
        leader_epoch: i32,
    ) -> std::io::Result<(Vec<u8>, i64)> {
        self.engine.read(log, partition, leader_epoch)
    }

    fn writer(&self) -> Arc<dyn PartitionWriter> {
        self.engine.clone()
    }

    fn legacy_logs(&self) -> Option<CoordinatorLogs> {
        self.engine
            .cluster
            .driver()
            .read(|n| n.coordinator_logs().clone(), Duration::from_secs(30))
    }

    fn allocate_producer_ids(&self, count: u32) -> Option<(i64, i64)> {
        let cmd = ClusterCommand::AllocateProducerIds { count };
        match self.engine.cluster.propose_blocking(cmd) {
            Ok(Outcome::ProducerIds { start, end }) => Some((start, end)),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot allocate producer ids");
                None
            }
        }
    }
}

impl EngineWriter {
    fn router(&self) -> std::io::Result<&Router> {
        self.router
            .get()
            .ok_or_else(|| std::io::Error::other("the engine is not running yet"))
    }

    fn read(
        &self,
        log: CoordinatorLog,
        partition: i32,
        leader_epoch: i32,
    ) -> std::io::Result<(Vec<u8>, i64)> {
        let router = self.router()?;
        let tp = TopicPartition::new(topic(log), partition);
        let owner = router.owner(&tp);
        router
            .run_on_blocking(owner, move |s| -> Result<(Vec<u8>, i64), String> {
                let p = s.partition(&tp).map_err(|e| e.to_string())?;
                if !p.is_leader() || p.leader_epoch != LeaderEpoch(leader_epoch) {
                    return Err(format!("{tp} is not led here in epoch {leader_epoch}"));
                }
                let end = p.log.log_end_offset();
                let mut from = p.log.log_start_offset();
                let mut out = Vec::new();
                while from < end {
                    let r = p
                        .log
                        .read(from, READ_CHUNK, end)
                        .map_err(|e| e.to_string())?;
                    let next = kmirror_log::batch::BatchIter::headers(&r.records)
                        .filter_map(Result::ok)
                        .last()
                        .map(|(h, _, _)| h.next_offset());
                    let Some(next) = next else {
                        break;
                    };
                    out.extend_from_slice(&r.records);
                    from = kmirror_types::Offset(next);
                }
                Ok((out, end.get()))
            })
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)
    }
}

impl PartitionWriter for EngineWriter {
    fn append(
        &self,
        log: CoordinatorLog,
        partition: i32,
        leader_epoch: i32,
        batches: Vec<u8>,
    ) -> std::io::Result<()> {
        let router = self.router()?;
        let tp = TopicPartition::new(topic(log), partition);
        let meta = self.cluster.snapshot();
        let Some(t) = meta.topics.get(&tp.topic) else {
            return Err(std::io::Error::other(format!(
                "{} does not exist",
                tp.topic
            )));
        };
        let min_insync = crate::handlers::produce::min_insync_replicas(t);
        let committed = crate::handlers::produce::committed_isr(t, partition, self.node_id);
        let owner = router.owner(&tp);
        let waiting = router
            .run_on_blocking(owner, move |s| -> Result<_, String> {
                let now = kmirror_engine::now_ms();
                let p = s.partition(&tp).map_err(|e| e.to_string())?;
                if let Some((epoch, isr, partition_epoch)) = committed {
                    p.sync_committed_isr(epoch, isr, partition_epoch, now);
                }
                if !p.enough_replicas(min_insync) {
                    return Err(format!("{tp}: fewer than {min_insync} replicas in sync"));
                }
                p.append_coordinator(&batches, LeaderEpoch(leader_epoch), now)
                    .map_err(|e| e.to_string())?;
                Ok(p.wait_ack(p.log.log_end_offset(), min_insync).err())
            })
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)?;
        let Some(rx) = waiting else {
            return Ok(());
        };
        match rx.recv_timeout(APPEND_TIMEOUT) {
            Ok(AckState::Done) => Ok(()),
            Ok(state) => Err(std::io::Error::other(format!(
                "{} partition {partition}: not replicated ({state:?})",
                topic(log)
            ))),
            Err(_) => Err(std::io::Error::other(format!(
                "{} partition {partition}: not replicated within {APPEND_TIMEOUT:?}",
                topic(log)
            ))),
        }
    }
}
