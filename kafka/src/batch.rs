//! Kafka record batches (magic v2) in fetch responses and Produce requests, with the record
//! crate's one implementation of the format (`riffle-record`, the same the embedded log
//! stores):
//!
//! - **fetch**: each batch in a fetch response becomes a [`FetchedBatch`] whose records section
//!   is a slice of the response buffer (no copy, no per-record work; compressed batches are
//!   decompressed once per batch); transaction markers and aborted transactions are dropped
//!   here;
//! - **produce**: a [`BatchBuilder`] seals its records as a Kafka batch (base offset 0, leader
//!   epoch -1, the producer's fields in a transaction), compressing once; those bytes are the
//!   request's records, never re-encoded.

use bytes::Bytes;
use riffle_record::{
    BatchBuilder, BatchHeader, BatchMeta, Compression, FetchedBatch, HEADER_LEN, LOG_OVERHEAD,
    Placement, TimestampType, TopicPartition, batch_crc,
};
use std::sync::Arc;

pub(crate) use riffle_record::ProducerFields;

use crate::error::{Error, Result};

/// One entry of a read_committed fetch's aborted-transaction list: a producer whose
/// transaction starting at `first_offset` was aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AbortedTxn {
    pub(crate) producer_id: i64,
    pub(crate) first_offset: i64,
}

/// Decodes the record batches of one fetched partition. A batch cut off at the end (the
/// broker's size limit) is left out; batches that end before `from` are dropped.
///
/// Control batches (transaction markers) and empty batches are skipped. With `aborted`
/// (`isolation_level=read_committed`: the fetch response's aborted-transaction list), so are
/// the batches of aborted transactions, as Kafka's consumer does: a producer's transactional
/// batches are dropped from the first offset of its aborted transaction until its ABORT
/// marker. When skipped batches end the response, an empty batch covering them is pushed
/// last, so the reader's next fetch starts after them instead of fetching them again.
pub(crate) fn decode_batches(
    tp: &TopicPartition,
    records: &Bytes,
    from: u64,
    aborted: Option<&[AbortedTxn]>,
    out: &mut Vec<FetchedBatch>,
) -> Result<()> {
    let mut aborted_sorted = aborted.map(<[AbortedTxn]>::to_vec).unwrap_or_default();
    aborted_sorted.sort_unstable_by_key(|a| a.first_offset);
    let mut next_aborted = 0;
    // Producers inside an aborted transaction at the current batch.
    let mut aborting: Vec<i64> = Vec::new();
    // The skipped batches since the last visible one: (first offset, last offset).
    let mut skipped: Option<(u64, u64)> = None;
    let mut pos = 0;
    while records.len() - pos >= LOG_OVERHEAD {
        let head = records.get(pos..).unwrap_or_default();
        let base_offset = i64::from_be_bytes(head[..8].try_into().unwrap_or_default());
        let batch_len = i32::from_be_bytes(head[8..12].try_into().unwrap_or_default());
        let err = |reason: String| Error::Batch {
            topic: tp.topic.to_string(),
            partition: tp.partition,
            offset: base_offset,
            reason,
        };
        let total = usize::try_from(batch_len)
            .ok()
            .filter(|&l| l >= HEADER_LEN - LOG_OVERHEAD)
            .map(|l| l + LOG_OVERHEAD)
            .ok_or_else(|| err(format!("impossible batch length {batch_len}")))?;
        if total > head.len() {
            break; // partial batch at the end of the response
        }
        let batch = records.slice(pos..pos + total);
        pos += total;
        let h = BatchHeader::parse(&batch).map_err(err)?;
        let actual = batch_crc(&batch);
        if h.crc != actual {
            return Err(err(format!(
                "CRC32C mismatch (batch says {:#010x}, data has {actual:#010x})",
                h.crc
            )));
        }
        let (base, last) = (h.base_offset, h.last_offset());
        if last < from {
            continue;
        }
        let control = h.is_control();
        let mut skip = control || h.record_count == 0;
        if aborted.is_some() && h.producer_id >= 0 {
            while let Some(a) = aborted_sorted.get(next_aborted)
                && a.first_offset <= last as i64
            {
                aborting.push(a.producer_id);
                next_aborted += 1;
            }
            if control {
                if is_abort_marker(&batch) {
                    aborting.retain(|&p| p != h.producer_id);
                }
            } else if h.is_transactional() && aborting.contains(&h.producer_id) {
                skip = true;
            }
        }
        if skip {
            skipped = Some((skipped.map_or(base, |(first, _)| first), last));
            continue;
        }
        skipped = None;
        out.push(FetchedBatch::decode(tp, &h, batch).map_err(|e| err(e.to_string()))?);
    }
    if let Some((first, last)) = skipped {
        let meta = BatchMeta {
            topic_partition: tp.clone(),
            base_offset: first,
            record_count: 0,
            first_timestamp: -1,
            max_timestamp: -1,
            timestamp_type: TimestampType::CreateTime,
            leader_epoch: -1,
            compression: Compression::None,
        };
        let delta = u32::try_from(last - first).unwrap_or(u32::MAX);
        out.push(FetchedBatch::from_parts(
            Arc::new(meta),
            delta,
            Bytes::new(),
        ));
    }
    Ok(())
}

/// Whether a control batch is a transaction's ABORT marker: its record's key is a version
/// (int16) and a type (int16), 0 for ABORT and 1 for COMMIT. Control batches are never
/// compressed. A marker that cannot be read counts as a COMMIT: the producer's batches
/// stay skipped until the broker's aborted list says otherwise.
fn is_abort_marker(batch: &Bytes) -> bool {
    use riffle_record::varint::{get_varint, get_varlong};
    let record = batch.get(HEADER_LEN..).unwrap_or_default();
    let mut pos = 0;
    let key_len = (|| {
        get_varint(record, &mut pos)?; // record length
        pos += 1; // attributes
        get_varlong(record, &mut pos)?; // timestamp delta
        get_varint(record, &mut pos)?; // offset delta
        get_varint(record, &mut pos)
    })();
    match key_len {
        Some(4..) => record.get(pos + 2..pos + 4) == Some(&[0, 0][..]),
        _ => false,
    }
}

/// Seals `builder`'s records as one Kafka v2 batch for a Produce request (base offset 0: the
/// broker assigns it; leader epoch -1), compressed with the builder's codec.
pub(crate) fn encode_batch(tp: &TopicPartition, builder: &mut BatchBuilder) -> Result<Bytes> {
    encode_batch_as(tp, builder, None)
}

/// [`encode_batch`], as part of a transaction when `producer` is given.
pub(crate) fn encode_batch_as(
    tp: &TopicPartition,
    builder: &mut BatchBuilder,
    producer: Option<ProducerFields>,
) -> Result<Bytes> {
    let at = Placement {
        base_offset: 0,
        leader_epoch: -1,
        producer,
    };
    let sealed = builder.seal(tp, at).map_err(|e| Error::Batch {
        topic: tp.topic.to_string(),
        partition: tp.partition,
        offset: -1,
        reason: e.to_string(),
    })?;
    Ok(Bytes::copy_from_slice(sealed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use riffle_record::ATTR_CONTROL;

    fn round_trip(compression: Compression) {
        let tp = TopicPartition::new("t", 1);
        let mut builder = BatchBuilder::new(compression);
        builder.push(5, Some(b"a"), Some(b"1"));
        builder.push(9, Some(b"b"), None);
        let mut encoded = encode_batch(&tp, &mut builder).expect("encodes").to_vec();
        encoded[..8].copy_from_slice(&40i64.to_be_bytes()); // as the broker assigns it
        let mut two = encoded.clone();
        two.extend_from_slice(&encoded[..30]); // a partial batch behind it
        let mut out = Vec::new();
        decode_batches(&tp, &Bytes::from(two), 0, None, &mut out).expect("decodes");
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].base_offset(), out[0].last_offset()), (40, 41));
        let records: Vec<_> = out[0].records().map(|r| r.expect("record")).collect();
        assert_eq!(records[1].offset(), 41);
        assert_eq!(records[1].timestamp(), 9);
        assert_eq!(records[0].value().map(|v| &v[..]), Some(&b"1"[..]));
        assert!(records[1].value().is_none());
        out.clear();
        decode_batches(&tp, &Bytes::from(encoded.clone()), 42, None, &mut out).expect("decodes");
        assert!(
            out.is_empty(),
            "a batch that ends before the fetch offset is dropped"
        );
        encoded[70] ^= 1;
        let err = decode_batches(&tp, &Bytes::from(encoded), 0, None, &mut out).expect_err("crc");
        assert!(err.to_string().contains("t-1 at offset 40"), "{err}");
    }

    #[test]
    fn batches_round_trip_with_every_codec() {
        round_trip(Compression::None);
        round_trip(Compression::Lz4);
        round_trip(Compression::Zstd);
        round_trip(Compression::Gzip);
        round_trip(Compression::Snappy);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let tp = TopicPartition::new("t", 0);
        let mut out = Vec::new();
        let mut junk = vec![0u8; 80];
        junk[8..12].copy_from_slice(&3i32.to_be_bytes());
        assert!(decode_batches(&tp, &Bytes::from(junk.clone()), 0, None, &mut out).is_err());
        junk[8..12].copy_from_slice(&60i32.to_be_bytes());
        assert!(decode_batches(&tp, &Bytes::from(junk), 0, None, &mut out).is_err());
    }

    /// One step of the transactional log the read_committed model replays.
    #[derive(Clone, Debug)]
    enum Step {
        /// A batch of `n` records by producer `p` (`None`: not transactional); a
        /// transactional write opens the producer's transaction if it has none.
        Write(Option<u8>, u8),
        /// Producer `p` ends its open transaction (if any): commit or abort.
        End(u8, bool),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (proptest::option::of(0u8..3), 1u8..4).prop_map(|(p, n)| Step::Write(p, n)),
            2 => (0u8..3, any::<bool>()).prop_map(|(p, commit)| Step::End(p, commit)),
        ]
    }

    /// `bytes` with its base offset set and its CRC recomputed (after attribute changes).
    fn placed(mut bytes: Vec<u8>, base: u64, control: bool) -> Vec<u8> {
        bytes[..8].copy_from_slice(&(base as i64).to_be_bytes());
        if control {
            let attributes = u16::from_be_bytes([bytes[21], bytes[22]]) | ATTR_CONTROL;
            bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
        }
        let crc = riffle_record::batch_crc(&bytes);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    proptest::proptest! {
        /// A read_committed fetch of a log of interleaved transactions returns exactly the
        /// records of committed transactions and of non-transactional writes, from the fetch
        /// offset up to the last stable offset, and its last batch ends where the next fetch
        /// must start, as a brute-force replay of the log says.
        #[test]
        fn read_committed_fetches_see_only_committed_records(
            steps in proptest::collection::vec(step(), 1..40),
            from_pick in 0u64..200,
            cut_pick in 0usize..64,
        ) {
            let tp = TopicPartition::new("t", 0);
            let mut offset = 0u64;
            // Per batch: (base, last, bytes, producer, visible record offsets if committed).
            let mut batches: Vec<(u64, u64, Vec<u8>)> = Vec::new();
            let mut open: [Option<(u64, Vec<u64>)>; 3] = Default::default();
            let mut visible: Vec<u64> = Vec::new();
            let mut aborted: Vec<(AbortedTxn, u64)> = Vec::new(); // and the marker's offset
            for s in &steps {
                match *s {
                    Step::Write(producer, n) => {
                        let mut b = BatchBuilder::new(Compression::None);
                        for i in 0..n {
                            let value = (offset + u64::from(i)).to_be_bytes();
                            b.push(1, Some(b"k"), Some(&value));
                        }
                        let fields = producer.map(|p| ProducerFields {
                            producer_id: 1000 + i64::from(p),
                            epoch: 0,
                            base_sequence: 0,
                        });
                        let bytes = encode_batch_as(&tp, &mut b, fields).unwrap().to_vec();
                        let offsets: Vec<u64> = (offset..offset + u64::from(n)).collect();
                        match producer {
                            None => visible.extend(&offsets),
                            Some(p) => open[p as usize]
                                .get_or_insert_with(|| (offset, Vec::new()))
                                .1
                                .extend(&offsets),
                        }
                        batches.push((offset, offset + u64::from(n) - 1, placed(bytes, offset, false)));
                        offset += u64::from(n);
                    }
                    Step::End(p, commit) => {
                        let Some((first, offsets)) = open[p as usize].take() else { continue };
                        let mut b = BatchBuilder::new(Compression::None);
                        b.push(1, Some(&[0, 0, 0, u8::from(commit)]), Some(&[0, 0, 0, 0, 0, 0]));
                        let fields = ProducerFields { producer_id: 1000 + i64::from(p), epoch: 0, base_sequence: -1 };
                        let bytes = encode_batch_as(&tp, &mut b, Some(fields)).unwrap().to_vec();
                        if commit {
                            visible.extend(offsets);
                        } else {
                            aborted.push((AbortedTxn { producer_id: 1000 + i64::from(p), first_offset: first as i64 }, offset));
                        }
                        batches.push((offset, offset, placed(bytes, offset, true)));
                        offset += 1;
                    }
                }
            }
            // The last stable offset: the first offset of the earliest open transaction.
            let lso = open.iter().flatten().map(|(first, _)| *first).min().unwrap_or(offset);
            let from = from_pick % (offset + 1);
            // The broker sends the batches below the LSO from the one holding `from`, up to its
            // size limit (whole batches, then a cut-off one), and the aborted transactions that
            // end at or after `from`.
            let stable: Vec<_> = batches.iter().filter(|b| b.1 < lso && b.1 >= from).collect();
            let whole = if stable.is_empty() { 0 } else { cut_pick % (stable.len() + 1) };
            let mut response = Vec::new();
            for b in &stable[..whole] {
                response.extend_from_slice(&b.2);
            }
            if let Some(b) = stable.get(whole) {
                response.extend_from_slice(&b.2[..b.2.len() / 2]);
            }
            let list: Vec<AbortedTxn> = aborted.iter().filter(|(_, marker)| *marker >= from).map(|(a, _)| *a).collect();
            let mut out = Vec::new();
            decode_batches(&tp, &Bytes::from(response), from, Some(&list), &mut out).unwrap();
            let got: Vec<u64> = out
                .iter()
                .flat_map(|b| b.records().map(|r| r.unwrap().offset()).collect::<Vec<_>>())
                .filter(|&o| o >= from)
                .collect();
            let end = stable[..whole].last().map(|b| b.1 + 1);
            let expected: Vec<u64> = visible
                .iter()
                .copied()
                .filter(|&o| o >= from && end.is_some_and(|e| o < e))
                .collect();
            let mut expected = expected;
            expected.sort_unstable();
            proptest::prop_assert_eq!(&got, &expected);
            // Each record's value is its own offset: nothing was mixed up.
            for b in &out {
                for r in b.records() {
                    let r = r.unwrap();
                    let value: [u8; 8] = r.value().unwrap()[..].try_into().unwrap();
                    proptest::prop_assert_eq!(u64::from_be_bytes(value), r.offset());
                }
            }
            proptest::prop_assert_eq!(out.last().map(|b| b.last_offset() + 1), end);
        }
    }
}
