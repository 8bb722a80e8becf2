//! The consumer protocol embedded in classic JoinGroup and SyncGroup bytes
//! (ConsumerProtocolSubscription and ConsumerProtocolAssignment, versions 0–3, non-flexible:
//! int16 string lengths, int32 array and bytes lengths). The coordinator reads a classic
//! member's subscription and owned partitions from them, and writes assignments in them, when
//! classic members share a group with KIP-848 members (Kafka 4.1's online migration).

use std::collections::{BTreeMap, BTreeSet};

/// Partitions by topic name.
pub type NamedParts = BTreeMap<String, BTreeSet<i32>>;

/// A ConsumerProtocolSubscription.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    /// v1+; empty before.
    pub owned: NamedParts,
    /// v3+.
    pub rack_id: Option<String>,
}

/// A ConsumerProtocolAssignment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Assignment {
    pub partitions: NamedParts,
    /// Custom assignors put their state here; Kafka refuses to convert a group that has some.
    pub user_data: Option<Vec<u8>>,
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn nullable_string(&mut self) -> Option<Option<String>> {
        let len = self.i16()?;
        if len < 0 {
            return Some(None);
        }
        Some(Some(
            String::from_utf8(self.take(len as usize)?.to_vec()).ok()?,
        ))
    }
    fn string(&mut self) -> Option<String> {
        self.nullable_string()?
    }
    fn nullable_bytes(&mut self) -> Option<Option<Vec<u8>>> {
        let len = self.i32()?;
        if len < 0 {
            return Some(None);
        }
        Some(Some(self.take(len as usize)?.to_vec()))
    }
    /// An array length: None when malformed, Some(0) for a null array.
    fn len(&mut self) -> Option<usize> {
        let n = self.i32()?;
        if n < 0 {
            return Some(0);
        }
        // Each element takes at least one byte: a larger count is corruption.
        (n as usize <= self.0.len()).then_some(n as usize)
    }
    fn named_parts(&mut self) -> Option<NamedParts> {
        let mut out = NamedParts::new();
        for _ in 0..self.len()? {
            let topic = self.string()?;
            let mut ps = BTreeSet::new();
            for _ in 0..self.len()? {
                ps.insert(self.i32()?);
            }
            out.entry(topic).or_default().extend(ps);
        }
        Some(out)
    }
}

/// The version a consumer-protocol blob starts with (the first two bytes), if any.
pub fn version(metadata: &[u8]) -> Option<i16> {
    Cursor(metadata).i16()
}

/// Reads a ConsumerProtocolSubscription; `None` if malformed. Fields of newer versions than
/// this reader knows are ignored, as Kafka's reader does.
pub fn read_subscription(metadata: &[u8]) -> Option<Subscription> {
    let mut c = Cursor(metadata);
    let version = c.i16()?;
    if version < 0 {
        return None;
    }
    let mut topics = Vec::new();
    for _ in 0..c.len()? {
        topics.push(c.string()?);
    }
    let mut s = Subscription {
        version,
        topics,
        ..Default::default()
    };
    if c.0.is_empty() {
        // Some clients end a v0 subscription after its topics.
        return Some(s);
    }
    let _user_data = c.nullable_bytes()?;
    if version >= 1 {
        s.owned = c.named_parts()?;
    }
    if version >= 2 {
        let _generation = c.i32()?;
    }
    if version >= 3 {
        s.rack_id = c.nullable_string()?;
    }
    Some(s)
}

/// Reads a ConsumerProtocolAssignment; an empty blob is an empty assignment (what a member
/// that never synced holds). `None` if malformed.
pub fn read_assignment(bytes: &[u8]) -> Option<Assignment> {
    if bytes.is_empty() {
        return Some(Assignment::default());
    }
    let mut c = Cursor(bytes);
    if c.i16()? < 0 {
        return None;
    }
    let partitions = c.named_parts()?;
    let user_data = if c.0.is_empty() {
        None
    } else {
        c.nullable_bytes()?
    };
    Some(Assignment {
        partitions,
        user_data,
    })
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    let len = i16::try_from(s.len()).expect("topic names fit an int16 length");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    let n = i32::try_from(n).expect("length fits an int32");
    out.extend_from_slice(&n.to_be_bytes());
}

/// Writes a ConsumerProtocolAssignment of `partitions` without user data, at `version`
/// (clamped to 0–3; the fields are the same in all of them).
pub fn write_assignment(partitions: &NamedParts, version: i16) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&version.clamp(0, 3).to_be_bytes());
    put_len(&mut out, partitions.len());
    for (topic, ps) in partitions {
        put_string(&mut out, topic);
        put_len(&mut out, ps.len());
        for p in ps {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
    // Null user data.
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out
}

/// Writes a ConsumerProtocolSubscription (for tests and tools).
pub fn write_subscription(s: &Subscription) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&s.version.to_be_bytes());
    put_len(&mut out, s.topics.len());
    for t in &s.topics {
        put_string(&mut out, t);
    }
    out.extend_from_slice(&(-1i32).to_be_bytes());
    if s.version >= 1 {
        put_len(&mut out, s.owned.len());
        for (topic, ps) in &s.owned {
            put_string(&mut out, topic);
            put_len(&mut out, ps.len());
            for p in ps {
                out.extend_from_slice(&p.to_be_bytes());
            }
        }
    }
    if s.version >= 2 {
        out.extend_from_slice(&(-1i32).to_be_bytes());
    }
    if s.version >= 3 {
        match &s.rack_id {
            Some(r) => put_string(&mut out, r),
            None => out.extend_from_slice(&(-1i16).to_be_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(v: &[(&str, &[i32])]) -> NamedParts {
        v.iter()
            .map(|(t, ps)| (t.to_string(), ps.iter().copied().collect()))
            .collect()
    }

    #[test]
    fn subscriptions_of_every_version_round_trip() {
        for version in 0..=3 {
            let s = Subscription {
                version,
                topics: vec!["a".into(), "b".into()],
                owned: if version >= 1 {
                    parts(&[("a", &[0, 2])])
                } else {
                    NamedParts::new()
                },
                rack_id: (version >= 3).then(|| "r1".to_string()),
            };
            assert_eq!(read_subscription(&write_subscription(&s)), Some(s));
        }
    }

    #[test]
    fn a_newer_subscription_version_keeps_the_fields_known_here() {
        let mut bytes = write_subscription(&Subscription {
            version: 3,
            topics: vec!["t".into()],
            ..Default::default()
        });
        bytes[1] = 4;
        bytes.extend_from_slice(&[0, 0, 0, 7]);
        let s = read_subscription(&bytes).expect("read");
        assert_eq!(s.topics, vec!["t".to_string()]);
    }

    #[test]
    fn truncated_or_negative_blobs_are_refused() {
        let bytes = write_subscription(&Subscription {
            version: 1,
            topics: vec!["topic".into()],
            owned: parts(&[("topic", &[1])]),
            rack_id: None,
        });
        // 2 + 4 + 2 + 5 bytes: version and topics, where a blob may end.
        for cut in (1..bytes.len()).filter(|c| *c != 13) {
            assert_eq!(read_subscription(&bytes[..cut]), None, "cut at {cut}");
        }
        assert_eq!(read_subscription(&[0xff, 0xff, 0, 0, 0, 0]), None);
        assert_eq!(read_assignment(&[0, 0, 0x7f, 0, 0, 0]), None);
    }

    #[test]
    fn assignments_round_trip_and_empty_means_nothing_assigned() {
        let p = parts(&[("x", &[0, 1]), ("y", &[3])]);
        for v in [0, 1, 3, 9] {
            let bytes = write_assignment(&p, v);
            assert_eq!(version(&bytes), Some(v.clamp(0, 3)));
            let a = read_assignment(&bytes).expect("read");
            assert_eq!(a.partitions, p);
            assert_eq!(a.user_data, None);
        }
        assert_eq!(read_assignment(&[]), Some(Assignment::default()));
    }

    #[test]
    fn assignment_user_data_is_read() {
        let mut bytes = write_assignment(&parts(&[("x", &[0])]), 0);
        bytes.truncate(bytes.len() - 4);
        bytes.extend_from_slice(&[0, 0, 0, 2, 9, 9]);
        assert_eq!(read_assignment(&bytes).unwrap().user_data, Some(vec![9, 9]));
    }
}
