//! The share-group "simple" assignor (Kafka 4.1's `SimpleAssignor`), over the partitions
//! whose share state is initialized.
//!
//! Share groups may give one partition to several members (records, not partitions, are what
//! members split), so the goal is spreading members over partitions, every member getting at
//! least one when there are any:
//!
//! - homogeneous subscriptions: `desired = ceil(partitions / members)`; each member is hashed
//!   onto one partition (Java's `String.hashCode` of its id, so members land where Kafka puts
//!   them); members keep current partitions while under `desired` and not hashed onto by
//!   another; the partitions left go round-robin, a member taking at most `desired + 1`;
//! - heterogeneous subscriptions: each member hashed onto one of its own partitions; the
//!   partitions neither hashed onto nor currently held go round-robin among each topic's
//!   subscribers; current holdings of topics still subscribed are kept.
//!
//! Kafka iterates hash maps where this iterates sorted collections: the rules are the same,
//! the tie-breaking order may differ.

use std::collections::{BTreeMap, BTreeSet};

/// A topic partition as the assignor sees it (topic key: an id or a name, the caller's choice).
pub type Tp = (String, i32);

/// One member's subscription and what it holds now.
#[derive(Debug, Clone, Default)]
pub struct MemberSpec {
    pub topics: BTreeSet<String>,
    pub current: BTreeSet<Tp>,
}

/// Java's `String.hashCode` (UTF-16 code units).
fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// Kafka's `Math.abs(hash % n)`.
fn hash_index(member: &str, n: usize) -> usize {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    (java_hash(member) % n).unsigned_abs() as usize
}

/// The target assignment of `members`; `assignable` holds each topic's initialized partitions.
pub fn assign(
    members: &BTreeMap<String, MemberSpec>,
    assignable: &BTreeMap<String, BTreeSet<i32>>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    let first = match members.values().next() {
        Some(f) => f,
        None => return out,
    };
    let targets = |topics: &BTreeSet<String>| -> Vec<Tp> {
        topics
            .iter()
            .flat_map(|t| {
                assignable
                    .get(t)
                    .into_iter()
                    .flatten()
                    .map(move |p| (t.clone(), *p))
            })
            .collect()
    };
    if members.values().all(|m| m.topics == first.topics) {
        homogeneous(members, &targets(&first.topics), &mut out);
    } else {
        let per_member: BTreeMap<&String, Vec<Tp>> = members
            .iter()
            .filter(|(_, s)| !s.topics.is_empty())
            .map(|(m, s)| (m, targets(&s.topics)))
            .collect();
        heterogeneous(members, &per_member, &mut out);
    }
    out
}

fn homogeneous(
    members: &BTreeMap<String, MemberSpec>,
    targets: &[Tp],
    out: &mut BTreeMap<String, BTreeSet<Tp>>,
) {
    if targets.is_empty() {
        return;
    }
    let desired = targets.len().div_ceil(members.len());
    let mut by_partition: BTreeMap<Tp, BTreeSet<&String>> = BTreeMap::new();
    let mut hashed: BTreeSet<Tp> = BTreeSet::new();
    for m in members.keys() {
        let tp = targets[hash_index(m, targets.len())].clone();
        hashed.insert(tp.clone());
        out.entry(m.clone()).or_default().insert(tp.clone());
        by_partition.entry(tp).or_default().insert(m);
    }
    let target_set: BTreeSet<&Tp> = targets.iter().collect();
    for (m, spec) in members {
        for tp in &spec.current {
            let held = out.entry(m.clone()).or_default();
            if target_set.contains(tp) && held.len() < desired && !hashed.contains(tp) {
                held.insert(tp.clone());
                by_partition.entry(tp.clone()).or_default().insert(m);
            }
        }
    }
    let unassigned: Vec<&Tp> = targets
        .iter()
        .filter(|tp| !by_partition.contains_key(*tp))
        .collect();
    let mut open: Vec<&String> = members.keys().collect();
    let mut i = 0usize;
    let mut k = 0usize;
    while k < unassigned.len() && !open.is_empty() {
        if i >= open.len() {
            i = 0;
        }
        let held = out.entry(open[i].clone()).or_default();
        // One over `desired` is allowed (hash collisions leave some members short).
        if held.len() <= desired {
            held.insert(unassigned[k].clone());
            k += 1;
            i += 1;
        } else {
            open.remove(i);
        }
    }
}

fn heterogeneous(
    members: &BTreeMap<String, MemberSpec>,
    per_member: &BTreeMap<&String, Vec<Tp>>,
    out: &mut BTreeMap<String, BTreeSet<Tp>>,
) {
    let mut subscribers: BTreeMap<&String, Vec<&String>> = BTreeMap::new();
    for (m, spec) in members {
        for t in &spec.topics {
            subscribers.entry(t).or_default().push(m);
        }
    }
    let mut new: BTreeMap<Tp, Vec<&String>> = BTreeMap::new();
    for (m, tps) in per_member {
        if !tps.is_empty() {
            new.entry(tps[hash_index(m, tps.len())].clone())
                .or_default()
                .push(m);
        }
    }
    let current: BTreeSet<&Tp> = members.values().flat_map(|s| s.current.iter()).collect();
    let all: BTreeSet<&Tp> = per_member.values().flatten().collect();
    let mut unassigned: BTreeMap<&String, Vec<&Tp>> = BTreeMap::new();
    for tp in all {
        if !new.contains_key(tp) && !current.contains(tp) {
            unassigned.entry(&tp.0).or_default().push(tp);
        }
    }
    for (topic, tps) in unassigned {
        let subs = &subscribers[topic];
        for (i, tp) in tps.into_iter().enumerate() {
            new.entry(tp.clone())
                .or_default()
                .push(subs[i % subs.len()]);
        }
    }
    for (tp, ms) in &new {
        for m in ms {
            out.entry((*m).clone()).or_default().insert(tp.clone());
        }
    }
    for (m, spec) in members {
        for tp in &spec.current {
            if spec.topics.contains(&tp.0) && !new.contains_key(tp) {
                out.entry(m.clone()).or_default().insert(tp.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(topics: &[&str], current: &[(&str, i32)]) -> MemberSpec {
        MemberSpec {
            topics: topics.iter().map(|t| t.to_string()).collect(),
            current: current.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
        }
    }

    fn parts(topic: &str, n: i32) -> (String, BTreeSet<i32>) {
        (topic.to_string(), (0..n).collect())
    }

    #[test]
    fn java_string_hash_matches_kafka() {
        // "hello".hashCode() == 99162322 in Java; a negative one wraps as Java does.
        assert_eq!(java_hash("hello"), 99_162_322);
        assert_eq!(java_hash("polygenelubricants"), i32::MIN);
        assert_eq!(
            hash_index("polygenelubricants", 7),
            (i32::MIN % 7).unsigned_abs() as usize
        );
    }

    #[test]
    fn every_partition_is_assigned_and_every_member_gets_one_even_when_they_outnumber_them() {
        let assignable: BTreeMap<_, _> = [parts("t", 6)].into();
        let members: BTreeMap<String, MemberSpec> = (0..3)
            .map(|i| (format!("member-{i}"), spec(&["t"], &[])))
            .collect();
        let got = assign(&members, &assignable);
        let covered: BTreeSet<&Tp> = got.values().flatten().collect();
        assert_eq!(covered.len(), 6, "{got:?}");
        // ceil(6 / 3) = 2, plus one for collisions.
        assert!(
            got.values().all(|a| !a.is_empty() && a.len() <= 3),
            "{got:?}"
        );

        let many: BTreeMap<String, MemberSpec> = (0..5)
            .map(|i| (format!("m{i}"), spec(&["t"], &[])))
            .collect();
        let two: BTreeMap<_, _> = [parts("t", 2)].into();
        let got = assign(&many, &two);
        assert!(got.values().all(|a| a.len() == 1), "{got:?}");
        let covered: BTreeSet<&Tp> = got.values().flatten().collect();
        assert_eq!(covered.len(), 2, "{got:?}");
    }

    #[test]
    fn only_initialized_partitions_are_assigned_and_an_empty_set_gives_nothing() {
        let members: BTreeMap<String, MemberSpec> = [("a".to_string(), spec(&["t"], &[]))].into();
        let none: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        assert!(assign(&members, &none)["a"].is_empty());
        let some: BTreeMap<_, _> = [("t".to_string(), [1, 3].into())].into();
        assert_eq!(
            assign(&members, &some)["a"],
            [("t".to_string(), 1), ("t".to_string(), 3)].into()
        );
    }

    #[test]
    fn current_holdings_are_kept_under_the_desired_count() {
        let assignable: BTreeMap<_, _> = [parts("t", 4)].into();
        let members: BTreeMap<String, MemberSpec> = [
            (
                "a".to_string(),
                spec(&["t"], &[("t", 0), ("t", 1), ("t", 2), ("t", 3)]),
            ),
            ("b".to_string(), spec(&["t"], &[])),
        ]
        .into();
        let got = assign(&members, &assignable);
        assert!(got["a"].len() <= 3 && !got["b"].is_empty(), "{got:?}");
        let covered: BTreeSet<&Tp> = got.values().flatten().collect();
        assert_eq!(covered.len(), 4);
    }

    #[test]
    fn heterogeneous_members_get_only_their_own_topics_and_every_partition_is_covered() {
        let assignable: BTreeMap<_, _> = [parts("x", 3), parts("y", 2)].into();
        let members: BTreeMap<String, MemberSpec> = [
            ("a".to_string(), spec(&["x"], &[])),
            ("b".to_string(), spec(&["x", "y"], &[])),
            ("c".to_string(), spec(&["y"], &[("y", 1)])),
        ]
        .into();
        let got = assign(&members, &assignable);
        assert!(got["a"].iter().all(|(t, _)| t == "x"), "{got:?}");
        assert!(got["c"].iter().all(|(t, _)| t == "y"), "{got:?}");
        let covered: BTreeSet<&Tp> = got.values().flatten().collect();
        assert_eq!(covered.len(), 5, "{got:?}");
    }
}
