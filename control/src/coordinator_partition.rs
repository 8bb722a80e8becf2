//! Which partition of an internal topic coordinates a key, as Kafka computes it: a group id's
//! partition of `__consumer_offsets` (`GroupCoordinatorService.partitionFor`) and a
//! transactional id's partition of `__transaction_state` (`TransactionStateManager
//! .partitionFor`) are both `Utils.abs(key.hashCode()) % partitions`, with Java's
//! `String.hashCode` (over UTF-16 code units, wrapping) and `Utils.abs` (which maps
//! `i32::MIN` to 0). Matching it exactly keeps a group on the partition a Kafka cluster with
//! the same partition count would give it.

/// Java's `String.hashCode`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The partition (of `partitions`, at least 1) that coordinates `key`.
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    let h = java_string_hash(key);
    // Kafka's Utils.abs: i32::MIN has no positive counterpart and maps to 0.
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values printed by Java 17 (`s.hashCode()`, `Utils.abs(h) % 50`).
    #[test]
    fn hashes_and_partitions_match_java_and_kafka() {
        let cases: [(&str, i32, i32); 10] = [
            ("", 0, 0),
            ("g", 103, 3),
            ("test-group", 627_841_412, 12),
            ("console-consumer-12345", 158_455_506, 6),
            ("Aa", 2112, 12),
            ("BB", 2112, 12),
            ("grüppe", -1_233_264_812, 12),
            ("群組", 1_045_024, 24),
            // Its hash is i32::MIN, which Utils.abs maps to 0.
            ("polygenelubricants", i32::MIN, 0),
            // Outside the BMP: a surrogate pair, two UTF-16 units.
            ("😀-emoji", -1_200_436_388, 38),
        ];
        for (key, hash, partition) in cases {
            assert_eq!(java_string_hash(key), hash, "{key}");
            assert_eq!(partition_for(key, 50), partition, "{key}");
        }
    }

    #[test]
    fn every_key_lands_in_range_even_with_one_partition() {
        for key in [
            "a",
            "polygenelubricants",
            "😀-emoji",
            "x".repeat(1000).as_str(),
        ] {
            assert_eq!(partition_for(key, 1), 0);
            assert!((0..8).contains(&partition_for(key, 8)));
        }
    }
}
