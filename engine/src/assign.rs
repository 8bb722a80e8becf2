//! Partition → core assignment. Deterministic (same answer on every core and across
//! restarts) so no table needs to be shared or persisted.

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
}

impl Assignment {
    pub fn parse(s: &str) -> Option<Assignment> {
        match s {
            "spread" => Some(Assignment::Spread),
            "hash" => Some(Assignment::Hash),
            _ => None,
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
        };
        (v % cores as u64) as usize
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
}
