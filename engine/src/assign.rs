//! Partition → core assignment. The broker-wide policy is deterministic (same answer on
//! every core and across restarts). On top of it, per-topic [`TopicRule`]s (a policy, a pin of
//! the whole topic, pins of single partitions) can be set at runtime; they live in the
//! immutable [`Routing`] table the router publishes (whoever sets them persists them, e.g. a
//! mirror's settings, and sets them again after a restart).
//!
//! Pure: no runtime, no I/O. The move protocol that keeps a partition on one core while its
//! owner changes is the router's ([`crate::Router::set_topic_rule_blocking`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kmirror_types::TopicPartition;

/// How partitions are spread over cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Assignment {
    /// `(hash(topic) + partition) % cores`: a topic's partitions land on consecutive cores,
    /// so N partitions over N cores are perfectly balanced. The default.
    #[default]
    Spread,
    /// `hash(topic, partition) % cores`: independent of partition numbering.
    Hash,
    /// `hash(topic) % cores`: all of a topic's partitions on one core.
    Topic,
}

impl Assignment {
    pub fn parse(s: &str) -> Option<Assignment> {
        match s {
            "spread" => Some(Assignment::Spread),
            "hash" => Some(Assignment::Hash),
            "topic" => Some(Assignment::Topic),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Assignment::Spread => "spread",
            Assignment::Hash => "hash",
            Assignment::Topic => "topic",
        }
    }

    pub fn core_for(self, tp: &TopicPartition, cores: usize) -> usize {
        if cores <= 1 {
            return 0;
        }
        let h = fnv1a(tp.topic.as_bytes());
        let v = match self {
            Assignment::Spread => h.wrapping_add(tp.partition as u64),
            Assignment::Hash => fnv1a_continue(h, &tp.partition.to_be_bytes()),
            Assignment::Topic => h,
        };
        (v % cores as u64) as usize
    }
}

/// A topic's own placement, overriding the broker-wide policy. Precedence: a partition's
/// pin, then the topic's pin, then the topic's policy, then the broker's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicRule {
    pub policy: Option<Assignment>,
    pub core: Option<usize>,
    pub partitions: BTreeMap<i32, usize>,
}

impl TopicRule {
    pub fn is_empty(&self) -> bool {
        self.policy.is_none() && self.core.is_none() && self.partitions.is_empty()
    }

    /// The core of `tp` (of this rule's topic). Pins beyond the core count wrap around
    /// (setters validate them; this only keeps `owner` total).
    pub fn core_for(&self, default: Assignment, tp: &TopicPartition, cores: usize) -> usize {
        let cores = cores.max(1);
        if let Some(c) = self.partitions.get(&tp.partition) {
            return c % cores;
        }
        if let Some(c) = self.core {
            return c % cores;
        }
        self.policy.unwrap_or(default).core_for(tp, cores)
    }
}

/// The routing table: immutable, replaced as a whole (the router publishes it through an
/// atomic pointer swap, so `owner` takes no lock).
#[derive(Debug, Clone, Default)]
pub struct Routing {
    pub default: Assignment,
    pub rules: HashMap<String, Arc<TopicRule>>,
    /// A topic whose rule is being changed: its new rule. `owner` still answers with the old
    /// one until the partitions that move are closed on their old cores; meanwhile no core
    /// may open a partition whose owner differs under the two rules.
    pub pending: HashMap<String, Arc<TopicRule>>,
}

impl Routing {
    pub fn new(default: Assignment) -> Routing {
        Routing {
            default,
            ..Routing::default()
        }
    }

    /// The core owning `tp` now.
    pub fn owner(&self, tp: &TopicPartition, cores: usize) -> usize {
        // Most brokers have no rule: skip hashing the topic name on every routed request.
        if self.rules.is_empty() {
            return self.default.core_for(tp, cores);
        }
        match self.rules.get(&tp.topic) {
            Some(r) => r.core_for(self.default, tp, cores),
            None => self.default.core_for(tp, cores),
        }
    }

    /// Whether `core` may open `tp` (it owns it, and keeps owning it through a pending move).
    pub fn may_open(&self, tp: &TopicPartition, core: usize, cores: usize) -> bool {
        self.owner(tp, cores) == core
            && self
                .pending
                .get(&tp.topic)
                .is_none_or(|r| r.core_for(self.default, tp, cores) == core)
    }
}

// FNV-1a: stable across Rust versions and processes (std's hasher is not guaranteed to be).
fn fnv1a(b: &[u8]) -> u64 {
    fnv1a_continue(0xcbf2_9ce4_8422_2325, b)
}

fn fnv1a_continue(mut h: u64, b: &[u8]) -> u64 {
    for x in b {
        h ^= *x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_balances_a_topics_partitions_over_cores() {
        let mut counts = [0; 3];
        for p in 0..6 {
            counts[Assignment::Spread.core_for(&TopicPartition::new("t", p), 3)] += 1;
        }
        assert_eq!(counts, [2, 2, 2]);
    }

    #[test]
    fn assignment_is_stable_and_in_range() {
        let tp = TopicPartition::new("orders", 7);
        let a = Assignment::Hash.core_for(&tp, 5);
        assert!(a < 5);
        assert_eq!(a, Assignment::Hash.core_for(&tp, 5));
        assert_eq!(Assignment::Spread.core_for(&tp, 1), 0);
    }

    #[test]
    fn topic_policy_puts_a_topics_partitions_on_one_core() {
        let c = Assignment::Topic.core_for(&TopicPartition::new("orders", 0), 4);
        for p in 1..16 {
            assert_eq!(
                Assignment::Topic.core_for(&TopicPartition::new("orders", p), 4),
                c
            );
        }
        assert_eq!(Assignment::parse("topic"), Some(Assignment::Topic));
        assert_eq!(Assignment::parse("Topic"), None);
    }

    #[test]
    fn partition_pin_beats_topic_pin_beats_policy() {
        let mut rule = TopicRule {
            policy: Some(Assignment::Topic),
            core: None,
            partitions: BTreeMap::new(),
        };
        let tp = |p| TopicPartition::new("t", p);
        let topic_core = Assignment::Topic.core_for(&tp(0), 3);
        assert_eq!(rule.core_for(Assignment::Spread, &tp(5), 3), topic_core);
        rule.core = Some((topic_core + 1) % 3);
        assert_eq!(
            rule.core_for(Assignment::Spread, &tp(5), 3),
            (topic_core + 1) % 3
        );
        rule.partitions.insert(5, (topic_core + 2) % 3);
        assert_eq!(
            rule.core_for(Assignment::Spread, &tp(5), 3),
            (topic_core + 2) % 3
        );
        assert_eq!(
            rule.core_for(Assignment::Spread, &tp(4), 3),
            (topic_core + 1) % 3
        );
    }

    #[test]
    fn a_pending_move_blocks_opening_on_both_cores() {
        let tp = TopicPartition::new("t", 0);
        let mut r = Routing::new(Assignment::Spread);
        let old = r.owner(&tp, 2);
        assert!(r.may_open(&tp, old, 2));
        let pin = TopicRule {
            partitions: [(0, 1 - old)].into(),
            ..TopicRule::default()
        };
        r.pending.insert("t".into(), Arc::new(pin.clone()));
        assert_eq!(
            r.owner(&tp, 2),
            old,
            "owner changes only once the move is done"
        );
        assert!(!r.may_open(&tp, old, 2));
        assert!(!r.may_open(&tp, 1 - old, 2));
        // Another partition of the topic that does not move is unaffected.
        let other = TopicPartition::new("t", 1);
        assert!(r.may_open(&other, r.owner(&other, 2), 2));
        r.pending.clear();
        r.rules.insert("t".into(), Arc::new(pin));
        assert_eq!(r.owner(&tp, 2), 1 - old);
        assert!(r.may_open(&tp, 1 - old, 2));
    }
}
