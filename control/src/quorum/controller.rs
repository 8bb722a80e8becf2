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
                adding: Vec::new(),
                removing: Vec::new(),
            },
            None => PartitionAssignment {
                replicas: replicas.clone(),
                isr: replicas.clone(),
                leader: NO_LEADER,
                partition_epoch: 0,
                adding: Vec::new(),
                removing: Vec::new(),
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
/// An ISR shrink that leaves a running reassignment's target all in sync completes it, as
/// Kafka's PartitionChangeBuilder does on every change.
fn broker_gone(state: &mut ClusterMetadata, broker: i32) {
    let live: BTreeSet<i32> = unfenced_brokers(state).into_iter().collect();
    for_each_partition(state, |_, a, leader_epoch| {
        let mut isr = a.isr.clone();
        if isr.len() > 1 {
            isr.retain(|b| *b != broker);
        }
        let change = Change {
            replicas: a.replicas.clone(),
            isr,
            adding: a.adding.clone(),
            removing: a.removing.clone(),
        };
        apply_change(&live, a, leader_epoch, change);
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
    // One change, as Kafka's AlterPartition builds it: an ISR that now holds every target
    // replica of a running reassignment also completes it (the removing replicas leave, the
    // leader moves if it was one of them).
    let change = Change {
        replicas: a.replicas.clone(),
        isr: new_isr.to_vec(),
        adding: a.adding.clone(),
        removing: a.removing.clone(),
    };
    apply_change(&live, a, epoch, change);
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

/// The state one partition change aims at (Kafka's PartitionChangeBuilder targets).
struct Change {
    replicas: Vec<i32>,
    isr: Vec<i32>,
    adding: Vec<i32>,
    removing: Vec<i32>,
}

/// Applies one partition change with Kafka's PartitionChangeBuilder rules, in its order:
/// 1. a running reassignment completes once the ISR without the removing replicas is
///    non-empty and holds every remaining replica: the removing replicas leave the replica
///    set and the ISR, adding/removing are cleared;
/// 2. the leader stays if it is in the new ISR and live, otherwise the first replica (in
///    replica order) that is, or none ([`NO_LEADER`]; unclean election stays off);
/// 3. a leader change, or a replica set that drops a broker, bumps the leader epoch (so the
///    removed replica's fetches are fenced); any change bumps the partition epoch.
///
/// Returns whether anything changed.
fn apply_change(
    live: &BTreeSet<i32>,
    a: &mut PartitionAssignment,
    leader_epoch: &mut i32,
    mut c: Change,
) -> bool {
    if !c.adding.is_empty() || !c.removing.is_empty() {
        let isr: Vec<i32> = c
            .isr
            .iter()
            .copied()
            .filter(|r| !c.removing.contains(r))
            .collect();
        let replicas: Vec<i32> = c
            .replicas
            .iter()
            .copied()
            .filter(|r| !c.removing.contains(r))
            .collect();
        if !isr.is_empty() && !replicas.is_empty() && replicas.iter().all(|r| isr.contains(r)) {
            c = Change {
                replicas,
                isr,
                adding: Vec::new(),
                removing: Vec::new(),
            };
        }
    }
    let valid = |r: i32| c.isr.contains(&r) && live.contains(&r);
    let leader = if valid(a.leader) {
        a.leader
    } else {
        c.replicas
            .iter()
            .copied()
            .find(|r| valid(*r))
            .unwrap_or(NO_LEADER)
    };
    let dropped = a.replicas.iter().any(|r| !c.replicas.contains(r));
    let changed = leader != a.leader
        || dropped
        || c.isr != a.isr
        || c.replicas != a.replicas
        || c.adding != a.adding
        || c.removing != a.removing;
    if !changed {
        return false;
    }
    if leader != a.leader || dropped {
        *leader_epoch += 1;
    }
    a.leader = leader;
    a.replicas = c.replicas;
    a.isr = c.isr;
    a.adding = c.adding;
    a.removing = c.removing;
    a.partition_epoch += 1;
    true
}

/// Kafka's `validateManualPartitionAssignment` for a reassignment target, with its messages
/// and order (ids sorted; the first unregistered or repeated one is reported).
pub fn validate_target(
    target: &[i32],
    registered: impl Fn(i32) -> bool,
) -> Result<(), MetadataError> {
    if target.is_empty() {
        return Err(MetadataError::InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = target.to_vec();
    sorted.sort_unstable();
    let mut prev = None;
    for b in sorted {
        if !registered(b) {
            return Err(MetadataError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes broker {b}, but no such broker is \
                 registered."
            )));
        }
        if prev == Some(b) {
            return Err(MetadataError::InvalidReplicaAssignment(format!(
                "The manual partition assignment includes the broker {b} more than once."
            )));
        }
        prev = Some(b);
    }
    Ok(())
}

/// AlterPartitionReassignments for one partition (Kafka's ReplicationControlManager):
/// `Some(target)` starts (or replaces) a reassignment, `None` cancels the running one.
///
/// Starting: the target replicas come first, then the removing ones (the original replicas
/// not in the target); adding = target minus the current replicas. The adding replicas
/// start as followers outside the ISR; the leader's AlterPartition that brings the last of
/// them into the ISR completes it ([`apply_change`]). A target already all in sync (a
/// reorder, a pure removal) completes at once. Cancelling reverts to the original replicas
/// and the ISR without the adding ones; refused (INVALID_REPLICA_ASSIGNMENT) when that ISR
/// would be empty, which would need an unclean election.
pub fn reassign(
    state: &mut ClusterMetadata,
    name: &str,
    partition: i32,
    target: Option<&[i32]>,
    allow_replication_factor_change: bool,
) -> Result<(), MetadataError> {
    let live: BTreeSet<i32> = unfenced_brokers(state).into_iter().collect();
    let registered: BTreeSet<i32> = state.brokers.keys().copied().collect();
    let t = state
        .topics
        .get_mut(name)
        .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
    let idx = usize::try_from(partition)
        .ok()
        .filter(|i| *i < t.leader_epochs.len())
        .ok_or_else(|| MetadataError::UnknownPartition {
            topic: name.to_string(),
            partition,
        })?;
    let TopicMeta {
        assignments,
        leader_epochs,
        ..
    } = t;
    let Some(a) = assignments.get_mut(idx) else {
        return Err(MetadataError::InvalidRequest(format!(
            "topic '{name}' is not replicated by the controller"
        )));
    };
    let epoch = &mut leader_epochs[idx];
    let change = match target {
        None => {
            if !a.reassigning() {
                return Err(MetadataError::NoReassignmentInProgress);
            }
            let isr: Vec<i32> = a
                .isr
                .iter()
                .copied()
                .filter(|r| !a.adding.contains(r))
                .collect();
            if isr.is_empty() {
                return Err(MetadataError::InvalidReplicaAssignment(format!(
                    "Unable to revert partition assignment for {name}:{partition} because it \
                     would require an unclean leader election."
                )));
            }
            Change {
                replicas: a.original_replicas(),
                isr,
                adding: Vec::new(),
                removing: Vec::new(),
            }
        }
        Some(target) => {
            validate_target(target, |b| registered.contains(&b))?;
            let from = a.original_replicas().len();
            if !allow_replication_factor_change && from != target.len() {
                return Err(MetadataError::ReplicationFactorChange {
                    from,
                    to: target.len(),
                });
            }
            let removing: BTreeSet<i32> = a
                .replicas
                .iter()
                .copied()
                .filter(|r| !target.contains(r))
                .collect();
            let adding: BTreeSet<i32> = target
                .iter()
                .copied()
                .filter(|r| !a.replicas.contains(r))
                .collect();
            let mut replicas = target.to_vec();
            replicas.extend(removing.iter().copied());
            // As Kafka's builder: an empty difference leaves the partition's current list.
            Change {
                replicas,
                isr: a.isr.clone(),
                adding: if adding.is_empty() {
                    a.adding.clone()
                } else {
                    adding.into_iter().collect()
                },
                removing: if removing.is_empty() {
                    a.removing.clone()
                } else {
                    removing.into_iter().collect()
                },
            }
        }
    };
    apply_change(&live, a, epoch, change);
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
            adding: Vec::new(),
            removing: Vec::new(),
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
            broker_configs: Default::default(),
            group_configs: Default::default(),
            features: Default::default(),
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

    fn three_brokers_one_topic(partitions: usize) -> ClusterMetadata {
        let broker = |id: i32| BrokerRegistration {
            id,
            incarnation: uuid::Uuid::from_u64_pair(2, id as u64),
            endpoints: Vec::new(),
            rack: None,
            fenced: false,
        };
        let mut state = ClusterMetadata {
            cluster_id: "c".into(),
            version: 0,
            topics: Default::default(),
            internal_topics: Default::default(),
            broker_configs: Default::default(),
            group_configs: Default::default(),
            features: Default::default(),
            brokers: [broker(1), broker(2), broker(3)]
                .into_iter()
                .map(|b| (b.id, b))
                .collect(),
        };
        let assignments = new_partitions(&state, &vec![vec![1, 2]; partitions]).unwrap();
        state.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: uuid::Uuid::from_u64_pair(1, 1),
                leader_epochs: vec![0; partitions],
                configs: Default::default(),
                mirror: None,
                internal: false,
                assignments,
            },
        );
        state
    }

    #[test]
    fn a_reassignment_adds_first_and_drops_the_removed_replicas_once_the_target_is_in_sync() {
        let mut s = three_brokers_one_topic(1);
        reassign(&mut s, "t", 0, Some(&[2, 3]), true).unwrap();
        let a = &s.topics["t"].assignments[0];
        // Target first, then the removing replicas; the leader stays, no leader epoch bump.
        assert_eq!(
            (
                &a.replicas[..],
                &a.isr[..],
                a.leader,
                &a.adding[..],
                &a.removing[..]
            ),
            (&[2, 3, 1][..], &[1, 2][..], 1, &[3][..], &[1][..])
        );
        assert_eq!((s.topics["t"].leader_epochs[0], a.partition_epoch), (0, 1));
        // The leader's ISR expansion with the new replica completes it: broker 1 leaves, and
        // as it led, the first target replica in the ISR takes over at a new leader epoch.
        alter_partition(&mut s, "t", 0, 1, 0, 1, &[1, 2, 3]).unwrap();
        let a = &s.topics["t"].assignments[0];
        assert_eq!(
            (&a.replicas[..], &a.isr[..], a.leader, a.reassigning()),
            (&[2, 3][..], &[2, 3][..], 2, false)
        );
        assert_eq!((s.topics["t"].leader_epochs[0], a.partition_epoch), (1, 2));
        // The deposed leader's next AlterPartition is fenced.
        assert!(matches!(
            alter_partition(&mut s, "t", 0, 1, 0, 2, &[1, 2]),
            Err(MetadataError::NotLeader { .. })
        ));
    }

    #[test]
    fn a_reorder_or_a_removal_in_sync_completes_at_once_and_cancel_reverts() {
        let mut s = three_brokers_one_topic(3);
        // Reorder: the same replicas, the leader stays, only the partition epoch moves.
        reassign(&mut s, "t", 0, Some(&[2, 1]), true).unwrap();
        let a = &s.topics["t"].assignments[0];
        assert_eq!(
            (&a.replicas[..], a.leader, a.reassigning()),
            (&[2, 1][..], 1, false)
        );
        assert_eq!(s.topics["t"].leader_epochs[0], 0);
        // Removal of an in-sync follower: done at once, a leader epoch bump fences it.
        reassign(&mut s, "t", 1, Some(&[1]), true).unwrap();
        let a = &s.topics["t"].assignments[1];
        assert_eq!(
            (&a.replicas[..], &a.isr[..], a.leader),
            (&[1][..], &[1][..], 1)
        );
        assert_eq!(s.topics["t"].leader_epochs[1], 1);
        // Cancel before the new replica caught up: back to the original replicas.
        reassign(&mut s, "t", 2, Some(&[3, 1]), true).unwrap();
        assert_eq!(s.topics["t"].assignments[2].replicas, [3, 1, 2]);
        reassign(&mut s, "t", 2, None, true).unwrap();
        let a = &s.topics["t"].assignments[2];
        assert_eq!(
            (&a.replicas[..], &a.isr[..], a.leader, a.reassigning()),
            (&[1, 2][..], &[1, 2][..], 1, false)
        );
        assert_eq!(
            s.topics["t"].leader_epochs[2], 1,
            "the adding replica is fenced"
        );
        assert!(matches!(
            reassign(&mut s, "t", 2, None, true),
            Err(MetadataError::NoReassignmentInProgress)
        ));
    }

    #[test]
    fn reassignment_targets_are_checked_as_kafka_checks_them() {
        let mut s = three_brokers_one_topic(1);
        let before = s.clone();
        let err = |s: &mut ClusterMetadata, name: &str, p: i32, target: Option<&[i32]>, rf| {
            reassign(s, name, p, target, rf).unwrap_err().to_string()
        };
        assert_eq!(
            err(&mut s, "nope", 0, Some(&[1]), true),
            "unknown topic 'nope'"
        );
        assert_eq!(
            err(&mut s, "t", 1, Some(&[1]), true),
            "Unable to find partition t:1."
        );
        assert_eq!(
            err(&mut s, "t", 0, Some(&[]), true),
            "The manual partition assignment includes an empty replica list."
        );
        assert_eq!(
            err(&mut s, "t", 0, Some(&[9, 2, 2]), true),
            "The manual partition assignment includes the broker 2 more than once."
        );
        assert_eq!(
            err(&mut s, "t", 0, Some(&[4, 1]), true),
            "The manual partition assignment includes broker 4, but no such broker is \
             registered."
        );
        assert_eq!(
            err(&mut s, "t", 0, Some(&[1, 2, 3]), false),
            "The replication factor is changed from 2 to 3"
        );
        assert_eq!(
            err(&mut s, "t", 0, None, true),
            "No partition reassignment is in progress."
        );
        assert_eq!(s, before);
    }
}
