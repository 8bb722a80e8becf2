//! Kafka's coordinator record format, shared by the group and transaction coordinators.
//!
//! Kafka's coordinators write key/value records to `__consumer_offsets` / `__transaction_state`
//! (`CoordinatorRecordSerde`): the key is the record type (the schema's `apiKey`) as an int16
//! followed by the key message at version 0; the value is the value message's version as an
//! int16 followed by the message at that version, or absent (a tombstone: the key is deleted).
//! The schemas are `group-coordinator/src/main/resources/common/message/*.json` and
//! `transaction-coordinator/.../TransactionLogKey.json` / `TransactionLogValue.json`; keys are
//! never flexible, values are flexible (compact strings and arrays, tagged fields) from the
//! version each schema names.
//!
//! kmirror's record file ([`crate::offsets_log::RecordFile`]) keeps one payload per frame, not
//! Kafka record batches, so a payload is a [`Payload`]: a first byte that says which kind it
//! is, then the record. Payloads of older versions were JSON objects (first byte `{`); callers
//! check [`is_legacy_json`] first and still read them.
//!
//! The primitives (big-endian integers, int16- or varint-length strings, arrays, tagged fields)
//! are written here with `bytes`: kafka-protocol 0.18 keeps its primitive encoders
//! crate-private, and this crate stays free of the wire-protocol crate anyway.

use bytes::{Buf, BufMut};

/// Why a payload does not decode.
pub type DecodeError = String;

const KIND_RECORD: u8 = 1;
const KIND_TRANSACTIONAL: u8 = 2;
const KIND_MARKER: u8 = 3;
const KIND_PRODUCER_ID_BLOCK: u8 = 4;

/// Whether a payload is a record of the old JSON encoding (written before Kafka's format).
pub fn is_legacy_json(payload: &[u8]) -> bool {
    payload.first() == Some(&b'{')
}

/// One payload of a coordinator record file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// A record as Kafka writes it: key bytes and value bytes, `None` for a tombstone, and
    /// record headers, where kmirror keeps what Kafka's schema has no field for (Kafka's
    /// readers ignore headers).
    Record {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        headers: Vec<(String, Vec<u8>)>,
    },
    /// A record of producer `producer_id`'s open transaction. Kafka writes a TxnOffsetCommit's
    /// offsets as ordinary OffsetCommit records inside a transactional batch of the producer
    /// (the batch header carries the producer id); they apply only once the transaction's
    /// COMMIT marker follows. kmirror keeps no batches in this file, so the producer id sits
    /// in front of the record.
    Transactional {
        producer_id: i64,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
    /// The end of producer `producer_id`'s transaction for `group`. Kafka writes a control
    /// batch whose record key is the control record type (version 0, ABORT 0 / COMMIT 1) and
    /// which ends the producer's transaction for every group of that partition; kmirror's
    /// coordinator applies a marker per group, so the group id follows the control key.
    Marker {
        producer_id: i64,
        commit: bool,
        group: String,
    },
    /// kmirror's own: every producer id below `end` may have been handed out by this
    /// coordinator. Kafka's brokers take producer-id blocks from the controller
    /// (AllocateProducerIds, kept in the metadata log); a one-node kmirror keeps them here.
    ProducerIdBlock { end: i64 },
}

impl Payload {
    /// A record without headers.
    pub fn record(key: Vec<u8>, value: Option<Vec<u8>>) -> Payload {
        Payload::Record {
            key,
            value,
            headers: Vec::new(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::classic();
        match self {
            Payload::Record {
                key,
                value,
                headers,
            } => {
                w.raw(&[KIND_RECORD]);
                w.key_value(key, value.as_deref());
                w.array_len(headers.len());
                for (name, v) in headers {
                    w.string(name);
                    w.bytes(v);
                }
            }
            Payload::Transactional {
                producer_id,
                key,
                value,
            } => {
                w.raw(&[KIND_TRANSACTIONAL]);
                w.i64(*producer_id);
                w.key_value(key, value.as_deref());
            }
            Payload::Marker {
                producer_id,
                commit,
                group,
            } => {
                w.raw(&[KIND_MARKER]);
                w.i64(*producer_id);
                // Kafka's ControlRecordType key: version, type (ABORT 0, COMMIT 1).
                w.i16(0);
                w.i16(i16::from(*commit));
                w.string(group);
            }
            Payload::ProducerIdBlock { end } => {
                w.raw(&[KIND_PRODUCER_ID_BLOCK]);
                w.i64(*end);
            }
        }
        w.into_bytes()
    }

    pub fn decode(payload: &[u8]) -> Result<Payload, DecodeError> {
        let Some((&kind, rest)) = payload.split_first() else {
            return Err("empty payload".into());
        };
        let mut r = Reader::classic(rest);
        let p = match kind {
            KIND_RECORD => {
                let (key, value) = r.key_value()?;
                let mut headers = Vec::new();
                for _ in 0..r.array_len()? {
                    headers.push((r.string()?, r.bytes()?));
                }
                Payload::Record {
                    key,
                    value,
                    headers,
                }
            }
            KIND_TRANSACTIONAL => {
                let producer_id = r.i64()?;
                let (key, value) = r.key_value()?;
                Payload::Transactional {
                    producer_id,
                    key,
                    value,
                }
            }
            KIND_MARKER => {
                let producer_id = r.i64()?;
                let version = r.i16()?;
                if version != 0 {
                    return Err(format!("control record key version {version}"));
                }
                let commit = match r.i16()? {
                    0 => false,
                    1 => true,
                    t => return Err(format!("control record type {t}")),
                };
                let group = r.string()?;
                Payload::Marker {
                    producer_id,
                    commit,
                    group,
                }
            }
            KIND_PRODUCER_ID_BLOCK => Payload::ProducerIdBlock { end: r.i64()? },
            k => return Err(format!("unknown payload kind {k}")),
        };
        r.end()?;
        Ok(p)
    }
}

/// The group or transactional id a payload is about: every key of Kafka's coordinator records
/// starts with it (after the record type), and a marker names its group. `None` for a
/// producer-id block, which belongs to no key.
pub fn payload_key_id(payload: &Payload) -> Option<String> {
    match payload {
        Payload::Record { key, .. } | Payload::Transactional { key, .. } => {
            let mut r = Reader::classic(key);
            r.i16().ok()?;
            r.string().ok()
        }
        Payload::Marker { group, .. } => Some(group.clone()),
        Payload::ProducerIdBlock { .. } => None,
    }
}

/// A key: the record type and the key message (version 0, never flexible).
pub fn key(record_type: i16, fields: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::classic();
    w.i16(record_type);
    fields(&mut w);
    w.into_bytes()
}

/// A value: its version and the message, compact from `flexible_from` on.
pub fn value(version: i16, flexible_from: i16, fields: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::classic();
    w.i16(version);
    w.flexible = version >= flexible_from;
    fields(&mut w);
    w.into_bytes()
}

/// Writes Kafka message fields; strings, bytes and arrays take their compact form when the
/// message version is flexible.
pub struct Writer {
    buf: Vec<u8>,
    flexible: bool,
}

/// Fields of a flexible struct without a version prefix (the data of a tagged field).
pub fn flexible(fields: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer {
        buf: Vec::new(),
        flexible: true,
    };
    fields(&mut w);
    w.into_bytes()
}

/// Fields of a non-flexible message without a version prefix (e.g. a record header's value).
pub fn classic(fields: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::classic();
    fields(&mut w);
    w.into_bytes()
}

impl Writer {
    fn classic() -> Writer {
        Writer {
            buf: Vec::new(),
            flexible: false,
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    fn key_value(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.classic_bytes(Some(key));
        self.classic_bytes(value);
    }

    fn classic_bytes(&mut self, v: Option<&[u8]>) {
        match v {
            Some(b) => {
                self.i32(len_i32(b.len()));
                self.raw(b);
            }
            None => self.i32(-1),
        }
    }

    fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8);
    }

    /// A compact length: `len + 1`, 0 meaning null.
    fn compact_len(&mut self, len: Option<usize>) {
        let n = len.map_or(0, |l| u32::try_from(l + 1).expect("length fits a u32"));
        self.uvarint(n);
    }

    pub fn i8(&mut self, v: i8) {
        self.buf.put_i8(v);
    }

    pub fn i16(&mut self, v: i16) {
        self.buf.put_i16(v);
    }

    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }

    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v);
    }

    pub fn uuid(&mut self, v: uuid::Uuid) {
        self.raw(v.as_bytes());
    }

    pub fn string(&mut self, v: &str) {
        self.nullable_string(Some(v));
    }

    pub fn nullable_string(&mut self, v: Option<&str>) {
        if self.flexible {
            self.compact_len(v.map(str::len));
        } else {
            let n = v.map_or(-1, |s| {
                i16::try_from(s.len()).expect("string fits an int16")
            });
            self.i16(n);
        }
        if let Some(s) = v {
            self.raw(s.as_bytes());
        }
    }

    pub fn bytes(&mut self, v: &[u8]) {
        if self.flexible {
            self.compact_len(Some(v.len()));
            self.raw(v);
        } else {
            self.classic_bytes(Some(v));
        }
    }

    /// An array's length; its elements follow.
    pub fn array_len(&mut self, n: usize) {
        if self.flexible {
            self.compact_len(Some(n));
        } else {
            self.i32(len_i32(n));
        }
    }

    /// The end of a flexible struct with tagged fields `(tag, data)`, in ascending tag order
    /// (each `data` built with [`flexible`]).
    pub fn tagged_fields(&mut self, fields: &[(u32, Vec<u8>)]) {
        debug_assert!(self.flexible, "tagged fields need a flexible version");
        self.uvarint(u32::try_from(fields.len()).expect("few tagged fields"));
        for (tag, data) in fields {
            self.uvarint(*tag);
            self.uvarint(u32::try_from(data.len()).expect("tagged field fits a u32"));
            self.raw(data);
        }
    }

    /// The end of a struct: an empty tagged-field section when flexible.
    pub fn no_tagged_fields(&mut self) {
        if self.flexible {
            self.uvarint(0);
        }
    }
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).expect("length fits an int32")
}

/// Reads Kafka message fields (the counterpart of [`Writer`]).
pub struct Reader<'a> {
    buf: &'a [u8],
    flexible: bool,
}

const SHORT: &str = "record ends early";

impl<'a> Reader<'a> {
    /// A reader over fields of a non-flexible message without a version prefix.
    pub fn classic(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            flexible: false,
        }
    }

    /// A reader over a key; returns it and the record type.
    pub fn key(bytes: &'a [u8]) -> Result<(i16, Reader<'a>), DecodeError> {
        let mut r = Reader::classic(bytes);
        let t = r.i16()?;
        Ok((t, r))
    }

    /// A reader over a value; returns it and the value's version, which must lie in
    /// `versions`.
    pub fn value(
        bytes: &'a [u8],
        versions: std::ops::RangeInclusive<i16>,
        flexible_from: i16,
    ) -> Result<(i16, Reader<'a>), DecodeError> {
        let mut r = Reader::classic(bytes);
        let v = r.i16()?;
        if !versions.contains(&v) {
            return Err(format!("value version {v} not in {versions:?}"));
        }
        r.flexible = v >= flexible_from;
        Ok((v, r))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(SHORT.into());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn key_value(&mut self) -> Result<(Vec<u8>, Option<Vec<u8>>), DecodeError> {
        let key = self.classic_bytes()?.ok_or("null key")?;
        Ok((key, self.classic_bytes()?))
    }

    fn classic_bytes(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(self.take(n as usize)?.to_vec()))
    }

    fn uvarint(&mut self) -> Result<u32, DecodeError> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.i8()? as u8;
            v |= u32::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 5 bytes".into())
    }

    /// A compact or classic length; `None` for null.
    fn len(
        &mut self,
        classic: fn(&mut Self) -> Result<i64, DecodeError>,
    ) -> Result<Option<usize>, DecodeError> {
        let n = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else {
            classic(self)?
        };
        Ok(usize::try_from(n).ok())
    }

    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        if !self.buf.has_remaining() {
            return Err(SHORT.into());
        }
        Ok(self.buf.get_i8())
    }

    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    pub fn uuid(&mut self) -> Result<uuid::Uuid, DecodeError> {
        let b: [u8; 16] = self.take(16)?.try_into().expect("16 bytes");
        Ok(uuid::Uuid::from_bytes(b))
    }

    pub fn string(&mut self) -> Result<String, DecodeError> {
        self.nullable_string()?
            .ok_or_else(|| "null in a non-nullable string".into())
    }

    pub fn nullable_string(&mut self) -> Result<Option<String>, DecodeError> {
        let Some(n) = self.len(|r| r.i16().map(i64::from))? else {
            return Ok(None);
        };
        let b = self.take(n)?;
        let s = std::str::from_utf8(b).map_err(|e| e.to_string())?;
        Ok(Some(s.to_string()))
    }

    pub fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self
            .len(|r| r.i32().map(i64::from))?
            .ok_or("null in non-nullable bytes")?;
        Ok(self.take(n)?.to_vec())
    }

    /// An array's length (a null array reads as empty).
    pub fn array_len(&mut self) -> Result<usize, DecodeError> {
        let n = self.len(|r| r.i32().map(i64::from))?.unwrap_or(0);
        // Every element takes at least one byte: a larger count is corruption.
        if n > self.buf.len() {
            return Err(format!("array of {n} elements in {} bytes", self.buf.len()));
        }
        Ok(n)
    }

    /// Reads a struct's tagged fields (when flexible), calling `known` for each tag with a
    /// reader over its data; tags it ignores are skipped, as Kafka skips unknown tags.
    pub fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &mut Reader<'a>) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if !self.flexible {
            return Ok(());
        }
        for _ in 0..self.uvarint()? {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let mut field = Reader {
                buf: self.take(size)?,
                flexible: true,
            };
            known(tag, &mut field)?;
        }
        Ok(())
    }

    /// Fails unless every byte was read.
    pub fn end(&self) -> Result<(), DecodeError> {
        if !self.buf.is_empty() {
            return Err(format!("{} trailing bytes", self.buf.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_kinds_round_trip_and_never_start_like_json() {
        let all = [
            Payload::record(vec![0, 1, 2], Some(vec![3])),
            Payload::record(vec![0, 2], None),
            Payload::Record {
                key: vec![0, 0],
                value: Some(vec![1]),
                headers: vec![("h".into(), vec![2, 3])],
            },
            Payload::ProducerIdBlock { end: 1000 },
            Payload::Transactional {
                producer_id: 7,
                key: vec![0, 1],
                value: Some(vec![]),
            },
            Payload::Marker {
                producer_id: 9,
                commit: true,
                group: "g".into(),
            },
        ];
        for p in all {
            let bytes = p.encode();
            assert!(!is_legacy_json(&bytes));
            assert_eq!(Payload::decode(&bytes).unwrap(), p);
        }
        assert!(is_legacy_json(br#"{"t":"GroupDeleted","group":"g"}"#));
    }

    #[test]
    fn a_record_payload_is_kind_then_length_prefixed_key_value_and_headers() {
        let bytes = Payload::record(vec![0xAA], None).encode();
        assert_eq!(
            bytes,
            [1, 0, 0, 0, 1, 0xAA, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0],
            "kind, key, null value, no headers"
        );
    }

    #[test]
    fn a_marker_carries_kafkas_control_record_key() {
        let bytes = Payload::Marker {
            producer_id: 1,
            commit: false,
            group: "g".into(),
        }
        .encode();
        assert_eq!(
            bytes,
            [3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, b'g'],
            "kind, producer id, control key version 0 and type ABORT, group"
        );
    }

    #[test]
    fn flexible_values_use_compact_forms_and_skip_unknown_tags() {
        let v = value(1, 1, |w| {
            w.string("ab");
            w.nullable_string(None);
            w.array_len(2);
            w.i32(5);
            w.i32(6);
            w.no_tagged_fields();
        });
        assert_eq!(v, [0, 1, 3, b'a', b'b', 0, 3, 0, 0, 0, 5, 0, 0, 0, 6, 0]);
        // The same with one unknown tagged field (tag 9, two bytes) before the end.
        let mut with_tag = v.clone();
        with_tag.pop();
        with_tag.extend_from_slice(&[1, 9, 2, 0xEE, 0xEE]);
        let (version, mut r) = Reader::value(&with_tag, 0..=1, 1).unwrap();
        assert_eq!(version, 1);
        assert_eq!(r.string().unwrap(), "ab");
        assert_eq!(r.nullable_string().unwrap(), None);
        assert_eq!(r.array_len().unwrap(), 2);
        assert_eq!((r.i32().unwrap(), r.i32().unwrap()), (5, 6));
        let mut seen = Vec::new();
        r.tagged_fields(|tag, _| {
            seen.push(tag);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, [9]);
        r.end().unwrap();
        assert!(Reader::value(&v, 2..=3, 1).is_err());
    }

    #[test]
    fn classic_values_use_int16_strings_and_int32_arrays() {
        let v = value(3, 4, |w| {
            w.string("x");
            w.nullable_string(None);
            w.bytes(b"yz");
            w.array_len(0);
            w.no_tagged_fields();
        });
        assert_eq!(
            v,
            [0, 3, 0, 1, b'x', 0xFF, 0xFF, 0, 0, 0, 2, b'y', b'z', 0, 0, 0, 0]
        );
    }
}
