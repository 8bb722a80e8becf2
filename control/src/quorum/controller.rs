//! The controller's replicated-cluster state machine (issue 12): broker registration and
//! fencing, replica placement, AlterPartition and leader election, as Kafka's KRaft
//! `ClusterControlManager` and `ReplicationControlManager` keep them.
//!
//! Two halves. The proposer side ([`propose_placement`]) makes the random choices (Kafka's
//! striped placement starts at a random broker with a random replica shift) and puts the
//! result in the command. The apply side (the other functions) is a pure function of
//! (state, command) run by every node on the committed log, so every node reaches the same
//! leaders, ISRs and epochs. Apply validates, and on `Err` changes nothing (the caller runs it
//! inside [`MetadataStore::update_cluster`]).
//!
//! Election rules (KRaft's, unclean election off):
//! - a broker that is fenced or unregistered leaves every ISR it is in, except that an ISR
//!   never becomes empty (its last member stays, as KRaft keeps it);
//! - a partition it led gets the first replica, in replica order, that is in the ISR and
//!   unfenced; with none, the leader is [`NO_LEADER`] until such a broker is unfenced;
//! - a leader change bumps the leader epoch and the partition epoch; an ISR-only change bumps
//!   the partition epoch (Kafka ≥ 3.6 no longer bumps the leader epoch on an ISR shrink).
//!
//! Must not depend on a runtime or a clock: when a broker counts as gone (missed heartbeats)
//! is the driver's policy; it proposes [`FenceBroker`](super::MetadataCommand::FenceBroker).
//!
//! [`MetadataStore::update_cluster`]: crate::metadata::MetadataStore::update_cluster

use std::collections::BTreeSet;

use crate::metadata::{
    BrokerRegistration, ClusterMetadata, MetadataError, PartitionAssignment, TopicMeta, NO_LEADER,
};

/// The unfenced brokers, by id: the candidates for new replicas.
pub fn unfenced_brokers(state: &ClusterMetadata) -> Vec<i32> {
    state
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .map(|b| b.id)
        .collect()
}

fn is_live(state: &ClusterMetadata, broker: i32) -> bool {
    state.brokers.get(&broker).is_some_and(|b| !b.fenced)
}

/// The replication factor a creation asks for: `requested`, or `default` for `-1` (Kafka's
/// `default.replication.factor`); refused when larger than the unfenced brokers.
pub fn replication_factor(
    requested: i16,
    default: i16,
    available: usize,
) -> Result<i32, MetadataError> {
    let rf = if requested == -1 { default } else { requested };
    if rf < 1 {
        return Err(MetadataError::InvalidReplicationFactor(rf));
    }
    if rf as usize > available {
        return Err(MetadataError::ReplicationFactorTooLarge {
            requested: rf.into(),
            available,
        });
    }
    Ok(rf.into())
}

/// Kafka's rack-unaware striped placement (the assignment `AdminUtils` and KRaft's placer
/// produce for one rack): partition `p` (counting from `start_partition`) starts at broker
/// `(p + start_index) % n`; the others follow at a distance of `1 + (shift + j) % (n - 1)`,
/// where the shift grows by one each time `p` wraps around the broker list, so followers of
/// one broker spread over the others. `brokers` in the order the ids sort.
pub fn place_replicas(
    brokers: &[i32],
    start_partition: i32,
    partitions: i32,
    rf: i32,
    start_index: usize,
    replica_shift: usize,
) -> Result<Vec<Vec<i32>>, MetadataError> {
    let n = brokers.len();
    if rf < 1 || rf as usize > n {
        return Err(MetadataError::ReplicationFactorTooLarge {
            requested: rf,
            available: n,
        });
    }
    let mut shift = replica_shift;
    let mut out = Vec::with_capacity(partitions.max(0) as usize);
    for i in 0..partitions.max(0) {
        let p = (start_partition.max(0) + i) as usize;
        if p > 0 && p.is_multiple_of(n) {
            shift += 1;
        }
        let first = (p + start_index) % n;
        let mut replicas = vec![brokers[first]];
        for j in 0..(rf as usize - 1) {
            let distance = 1 + (shift + j) % (n - 1);
            replicas.push(brokers[(first + distance) % n]);
        }
        out.push(replicas);
    }
    Ok(out)
}

/// The proposer's placement for new partitions `start_partition..start_partition+partitions`
/// among the unfenced brokers, with Kafka's random start and shift.
pub fn propose_placement(
    state: &ClusterMetadata,
    start_partition: i32,
    partitions: i32,
    requested_rf: i16,
    default_rf: i16,
) -> Result<Vec<Vec<i32>>, MetadataError> {
    let brokers = unfenced_brokers(state);
    let rf = replication_factor(requested_rf, default_rf, brokers.len())?;
    let r = uuid::Uuid::new_v4().as_u64_pair();
    let n = brokers.len() as u64;
    place_replicas(
        &brokers,
        start_partition,
        partitions,
        rf,
        (r.0 % n) as usize,
        (r.1 % n) as usize,
    )
}

/// The new partitions' state from their replica lists: every unfenced replica in the ISR, the
/// first of them leads (a replica fenced since the proposal is left out, as KRaft's creation
/// does; with none live, [`NO_LEADER`] and the full list as ISR).
pub fn new_partitions(
    state: &ClusterMetadata,
    assignments: &[Vec<i32>],
) -> Result<Vec<PartitionAssignment>, MetadataError> {
    let mut out = Vec::with_capacity(assignments.len());
    let rf = assignments.first().map_or(0, Vec::len);
    for replicas in assignments {
        if replicas.is_empty() || replicas.len() != rf {
            return Err(MetadataError::InvalidRequest(
                "every partition needs the same, non-zero number of replicas".into(),
            ));
        }
        let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
        if distinct.len() != replicas.len() {
            return Err(MetadataError::InvalidRequest(format!(
                "duplicate broker in replica assignment {replicas:?}"
            )));
        }
        if let Some(b) = replicas.iter().find(|b| !state.brokers.contains_key(b)) {
            return Err(MetadataError::BrokerNotRegistered(*b));
        }
        let live: Vec<i32> = replicas
            .iter()
            .copied()
            .filter(|b| is_live(state, *b))
            .collect();
        out.push(match live.first() {
            Some(&leader) => PartitionAssignment {
                replicas: replicas.clone(),
                isr: live,
                leader,
                partition_epoch: 0,
            },
            None => PartitionAssignment {
                replicas: replicas.clone(),
                isr: replicas.clone(),
                leader: NO_LEADER,
                partition_epoch: 0,
            },
        });
    }
    Ok(out)
}

/// Registers (or re-registers) a broker. A registration that fences or unfences it has the
/// effects of [`set_fenced`].
pub fn register_broker(
    state: &mut ClusterMetadata,
    reg: &BrokerRegistration,
) -> Result<(), MetadataError> {
    if reg.id < 0 {
        return Err(MetadataError::InvalidRequest(format!(
            "invalid broker id {}",
            reg.id
        )));
    }
    let was_live = is_live(state, reg.id);
    state.brokers.insert(reg.id, reg.clone());
    if was_live && reg.fenced {
        broker_gone(state, reg.id);
    } else if !reg.fenced {
        elect_where_leaderless(state);
    }
    Ok(())
}

/// Fences or unfences a registered broker. Fencing removes it from ISRs and moves its
/// leaderships; unfencing elects leaders for partitions that had none.
pub fn set_fenced(state: &mut ClusterMetadata, id: i32, fenced: bool) -> Result<(), MetadataError> {
    let b = state
        .brokers
        .get_mut(&id)
        .ok_or(MetadataError::BrokerNotRegistered(id))?;
    b.fenced = fenced;
    if fenced {
        broker_gone(state, id);
    } else {
        elect_where_leaderless(state);
    }
    Ok(())
}

/// Forgets a broker (it stays named in replica lists, as in Kafka, until reassigned).
pub fn unregister_broker(state: &mut ClusterMetadata, id: i32) -> Result<(), MetadataError> {
    state
        .brokers
        .remove(&id)
        .ok_or(MetadataError::BrokerNotRegistered(id))?;
    broker_gone(state, id);
    Ok(())
}

/// The first replica, in replica order, that is in the ISR and live.
fn elect(state: &ClusterMetadata, a: &PartitionAssignment) -> i32 {
    a.replicas
        .iter()
        .copied()
        .find(|r| a.isr.contains(r) && is_live(state, *r))
        .unwrap_or(NO_LEADER)
}

/// Applies `f` to every replicated partition, in topic-name and partition order.
fn for_each_partition(
    state: &mut ClusterMetadata,
    mut f: impl FnMut(&ClusterMetadata, &mut PartitionAssignment, &mut i32),
) {
    let names: Vec<String> = state.topics.keys().cloned().collect();
    for name in names {
        let mut t = state.topics.remove(&name).expect("listed");
        let TopicMeta {
            assignments,
            leader_epochs,
            ..
        } = &mut t;
        for (a, epoch) in assignments.iter_mut().zip(leader_epochs.iter_mut()) {
            f(state, a, epoch);
        }
        state.topics.insert(name, t);
    }
}

/// `broker` is no longer live: out of every ISR (never emptying one), its leaderships moved.
fn broker_gone(state: &mut ClusterMetadata, broker: i32) {
    for_each_partition(state, |state, a, leader_epoch| {
        let mut changed = false;
        if a.isr.len() > 1 && a.isr.contains(&broker) {
            a.isr.retain(|b| *b != broker);
            changed = true;
        }
        if a.leader == broker {
            a.leader = elect(state, a);
            *leader_epoch += 1;
            changed = true;
        }
        if changed {
            a.partition_epoch += 1;
        }
    });
}

/// Partitions without a leader take the first live ISR member, if one is back.
fn elect_where_leaderless(state: &mut ClusterMetadata) {
    for_each_partition(state, |state, a, leader_epoch| {
        if a.leader != NO_LEADER {
            return;
        }
        let leader = elect(state, a);
        if leader != NO_LEADER {
            a.leader = leader;
            *leader_epoch += 1;
            a.partition_epoch += 1;
        }
    });
}

fn replicated_partition<'a>(
    state: &'a mut ClusterMetadata,
    name: &str,
    partition: i32,
) -> Result<(&'a mut PartitionAssignment, &'a mut i32), MetadataError> {
    let t = state
        .topics
        .get_mut(name)
        .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
    let idx = usize::try_from(partition)
        .ok()
        .filter(|i| *i < t.leader_epochs.len())
        .ok_or_else(|| {
            MetadataError::InvalidPartitions(format!("topic '{name}' has no partition {partition}"))
        })?;
    let TopicMeta {
        assignments,
        leader_epochs,
        ..
    } = t;
    match assignments.get_mut(idx) {
        Some(a) => Ok((a, &mut leader_epochs[idx])),
        None => Err(MetadataError::InvalidRequest(format!(
            "topic '{name}' is not replicated by the controller"
        ))),
    }
}

/// One AlterPartition item (an ISR change proposed by the leader), with Kafka's checks in
/// Kafka's order: the sender leads, its leader epoch and partition epoch are current, the new
/// ISR holds the leader, only replicas, and only registered unfenced brokers. Bumps the
/// partition epoch when the ISR changes.
pub fn alter_partition(
    state: &mut ClusterMetadata,
    name: &str,
    partition: i32,
    broker: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    new_isr: &[i32],
) -> Result<(), MetadataError> {
    let live: BTreeSet<i32> = unfenced_brokers(state).into_iter().collect();
    let registered: BTreeSet<i32> = state.brokers.keys().copied().collect();
    let (a, epoch) = replicated_partition(state, name, partition)?;
    let topic = name.to_string();
    if a.leader != broker {
        return Err(MetadataError::NotLeader {
            topic,
            partition,
            broker,
        });
    }
    if leader_epoch != *epoch {
        return Err(MetadataError::FencedLeaderEpoch {
            topic,
            partition,
            given: leader_epoch,
            current: *epoch,
        });
    }
    if partition_epoch != a.partition_epoch {
        return Err(MetadataError::InvalidUpdateVersion {
            topic,
            partition,
            given: partition_epoch,
            current: a.partition_epoch,
        });
    }
    let distinct: BTreeSet<i32> = new_isr.iter().copied().collect();
    if distinct.len() != new_isr.len() || !distinct.contains(&broker) {
        return Err(MetadataError::InvalidRequest(format!(
            "the new ISR {new_isr:?} of {topic}-{partition} must hold the leader {broker} once \
             and no broker twice"
        )));
    }
    if let Some(b) = new_isr.iter().find(|b| !a.replicas.contains(b)) {
        return Err(MetadataError::InvalidRequest(format!(
            "the new ISR of {topic}-{partition} names broker {b}, which is not a replica"
        )));
    }
    if let Some(b) = new_isr.iter().find(|b| !live.contains(b)) {
        let reason = if registered.contains(b) {
            "it is fenced"
        } else {
            "it is not registered"
        };
        return Err(MetadataError::IneligibleReplica {
            topic,
            partition,
            broker: *b,
            reason: reason.into(),
        });
    }
    if a.isr != new_isr {
        a.isr = new_isr.to_vec();
        a.partition_epoch += 1;
    }
    Ok(())
}

/// ElectLeaders PREFERRED for one partition: the first replica leads if it is in the ISR and
/// live. Bumps both epochs.
pub fn elect_preferred(
    state: &mut ClusterMetadata,
    name: &str,
    partition: i32,
) -> Result<(), MetadataError> {
    let live: BTreeSet<i32> = unfenced_brokers(state).into_iter().collect();
    let (a, epoch) = replicated_partition(state, name, partition)?;
    let preferred = a.replicas[0];
    let topic = name.to_string();
    if a.leader == preferred {
        return Err(MetadataError::ElectionNotNeeded { topic, partition });
    }
    if !a.isr.contains(&preferred) || !live.contains(&preferred) {
        return Err(MetadataError::PreferredLeaderNotAvailable { topic, partition });
    }
    a.leader = preferred;
    a.partition_epoch += 1;
    *epoch += 1;
    Ok(())
}

/// Kafka's automatic preferred-leader balancing (`auto.leader.rebalance.enable`): the
/// partitions, in name and index order, whose leader is not their preferred (first) replica
/// while that replica is unfenced and in the ISR, at most `max` of them. Kafka 4.1's KRaft
/// controller (`maybeBalancePartitionLeaders`) elects every such partition, up to a cap per
/// run; `leader.imbalance.per.broker.percentage` is not consulted there (only the old
/// ZooKeeper controller used it), so it is not here either. Each pick is then proposed as an
/// `ElectPreferredLeader`, which checks the same conditions again when applied.
pub fn preferred_leader_imbalance(state: &ClusterMetadata, max: usize) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for (name, t) in &state.topics {
        for (i, a) in t.assignments.iter().enumerate() {
            if out.len() >= max {
                return out;
            }
            let Some(&preferred) = a.replicas.first() else {
                continue;
            };
            if a.leader != preferred && a.isr.contains(&preferred) && is_live(state, preferred) {
                out.push((name.clone(), i as i32));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn striped_placement_gives_kafkas_assignment_for_the_same_start_and_shift() {
        // Five brokers, RF 3, ten partitions, start index 0, shift 0: the assignment Kafka's
        // rack-unaware algorithm produces (the shift grows when partition 5 wraps around).
        let expect: [[i32; 3]; 10] = [
            [0, 1, 2],
            [1, 2, 3],
            [2, 3, 4],
            [3, 4, 0],
            [4, 0, 1],
            [0, 2, 3],
            [1, 3, 4],
            [2, 4, 0],
            [3, 0, 1],
            [4, 1, 2],
        ];
        let got = place_replicas(&[0, 1, 2, 3, 4], 0, 10, 3, 0, 0).unwrap();
        assert_eq!(got, expect.map(|r| r.to_vec()).to_vec());
        // A start index and shift move the first replica and the followers' distance.
        let got = place_replicas(&[10, 20, 30], 0, 4, 2, 2, 1).unwrap();
        assert_eq!(
            got,
            [vec![30, 20], vec![10, 30], vec![20, 10], vec![30, 10]]
        );
        // Continuing a topic (CreatePartitions) counts from its partition count; as in Kafka,
        // the shift grows only at wraps after that start (partition 10 here).
        let tail = place_replicas(&[0, 1, 2, 3, 4], 7, 5, 2, 3, 2).unwrap();
        assert_eq!(
            tail,
            [vec![0, 3], vec![1, 4], vec![2, 0], vec![3, 2], vec![4, 3]]
        );
        // One broker, RF 1: the one-node case.
        assert_eq!(
            place_replicas(&[5], 0, 3, 1, 0, 0).unwrap(),
            vec![vec![5]; 3]
        );
    }

    #[test]
    fn the_replication_factor_comes_from_the_request_or_the_default_and_is_bounded() {
        assert_eq!(replication_factor(-1, 2, 3).unwrap(), 2);
        assert_eq!(replication_factor(3, 1, 3).unwrap(), 3);
        assert!(matches!(
            replication_factor(4, 1, 3),
            Err(MetadataError::ReplicationFactorTooLarge {
                requested: 4,
                available: 3
            })
        ));
        assert!(matches!(
            replication_factor(-1, 3, 1),
            Err(MetadataError::ReplicationFactorTooLarge { .. })
        ));
        assert!(matches!(
            replication_factor(0, 1, 3),
            Err(MetadataError::InvalidReplicationFactor(0))
        ));
        assert!(place_replicas(&[], 0, 1, 1, 0, 0).is_err());
    }

    #[test]
    fn imbalance_picks_partitions_whose_preferred_replica_is_live_and_in_sync() {
        let part = |replicas: [i32; 3], isr: &[i32], leader: i32| PartitionAssignment {
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            leader,
            partition_epoch: 0,
        };
        let topic = |name: &str, assignments: Vec<PartitionAssignment>| TopicMeta {
            name: name.into(),
            id: uuid::Uuid::from_u64_pair(1, name.len() as u64),
            leader_epochs: vec![0; assignments.len()],
            configs: Default::default(),
            mirror: None,
            internal: false,
            assignments,
        };
        let broker = |id: i32, fenced: bool| BrokerRegistration {
            id,
            incarnation: uuid::Uuid::from_u64_pair(2, id as u64),
            endpoints: Vec::new(),
            rack: None,
            fenced,
        };
        let mut state = ClusterMetadata {
            cluster_id: "c".into(),
            version: 0,
            topics: Default::default(),
            internal_topics: Default::default(),
            brokers: [broker(1, false), broker(2, false), broker(3, true)]
                .into_iter()
                .map(|b| (b.id, b))
                .collect(),
        };
        state.topics.insert(
            "b".into(),
            topic(
                "b",
                vec![
                    // Led by its preferred replica: balanced.
                    part([1, 2, 3], &[1, 2, 3], 1),
                    // Preferred 1 is back in the ISR: move the leadership home.
                    part([1, 2, 3], &[1, 2], 2),
                    // Preferred 2 not in the ISR (still catching up): stays.
                    part([2, 1, 3], &[1, 3], 1),
                    // Preferred 3 in the ISR but fenced: stays.
                    part([3, 1, 2], &[1, 2, 3], 1),
                    // Leaderless with preferred 2 in sync: elected too, as in Kafka.
                    part([2, 3, 1], &[2], NO_LEADER),
                ],
            ),
        );
        state
            .topics
            .insert("a".into(), topic("a", vec![part([2, 1, 3], &[2, 1], 1)]));
        // A one-node topic (no assignments) is never imbalanced.
        state.topics.insert("c".into(), topic("c", Vec::new()));
        let want = vec![("a".to_string(), 0), ("b".into(), 1), ("b".into(), 4)];
        assert_eq!(preferred_leader_imbalance(&state, 1000), want);
        // The cap keeps the order, so the next run continues where this one stopped.
        assert_eq!(preferred_leader_imbalance(&state, 2), want[..2]);
        // Every pick is an election the apply side accepts; afterwards nothing is left.
        for (name, p) in want {
            elect_preferred(&mut state, &name, p).unwrap();
        }
        assert!(preferred_leader_imbalance(&state, 1000).is_empty());
        assert_eq!(state.topics["b"].leader_epochs, [0, 1, 0, 0, 1]);
    }
}
