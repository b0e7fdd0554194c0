//! The four codecs of a batch's records section, as Kafka writes them (the embedded log stores
//! batches as Kafka does, and riffle-kafka sends them as they are):
//!
//! - **gzip**: one gzip member (RFC 1952), as Java's `GZIPOutputStream` writes (`flate2`,
//!   pure-Rust deflate, default level 6). Reading accepts several concatenated members.
//! - **snappy**: Kafka's Java client writes snappy-java's *xerial* framing: the 8-byte magic
//!   `0x82 "SNAPPY" 0x00`, two big-endian 4-byte version numbers, then blocks, each a 4-byte
//!   big-endian length and one raw snappy block (`snap`). Other clients (librdkafka, for one)
//!   may write a bare raw snappy block; reading takes both, as snappy-java does.
//!
//! - **LZ4**: the LZ4 frame format (`lz4_flex::frame`, independent 64 KiB blocks, no content
//!   checksum), which Kafka's `Lz4BlockOutputStream` writes and reads.
//! - **Zstandard**: one zstd frame at the default level; a frame without its content size (as
//!   zstd-jni's stream writes) is read as a stream.
//!
//! Decompression stops at a limit, so a small payload cannot expand without bound.

use std::cell::RefCell;
use std::io::{Read, Write};

use crate::types::Compression;

/// The xerial framing's magic, at the start of a framed snappy payload.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// The framing's header: the magic, the version and the oldest compatible version.
const XERIAL_HEADER_LEN: usize = 16;
/// Uncompressed bytes per snappy block written (snappy-java's default is 32 KiB).
const SNAPPY_BLOCK: usize = 32 << 10;

/// A gzip or snappy payload that does not decode, or decodes beyond the limit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The compressed bytes are damaged or not of the codec.
    #[error("{0}")]
    Corrupt(String),
    /// The payload decompresses to more than the caller allows.
    #[error("decompresses to more than {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

/// Appends `src` to `out` as one gzip member.
pub fn gzip_compress(src: &[u8], out: &mut Vec<u8>) -> std::io::Result<()> {
    let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    encoder.write_all(src)?;
    encoder.finish()?;
    Ok(())
}

/// Appends the decompressed gzip `src` to `out`, refusing more than `limit` bytes.
pub fn gzip_decompress(src: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let start = out.len();
    let mut decoder = flate2::read::MultiGzDecoder::new(src).take(limit as u64 + 1);
    decoder
        .read_to_end(out)
        .map_err(|e| CodecError::Corrupt(format!("gzip: {e}")))?;
    if out.len() - start > limit {
        return Err(CodecError::TooLarge { limit });
    }
    Ok(())
}

/// Appends `src` to `out` in the xerial framing (what Kafka's Java client writes and reads).
pub fn snappy_compress(src: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
    out.extend_from_slice(&XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    let mut encoder = snap::raw::Encoder::new();
    for block in src.chunks(SNAPPY_BLOCK) {
        let at = out.len();
        out.resize(at + 4 + snap::raw::max_compress_len(block.len()), 0);
        let n = encoder
            .compress(block, &mut out[at + 4..])
            .map_err(|e| CodecError::Corrupt(format!("snappy: {e}")))?;
        let len = u32::try_from(n).map_err(|_| CodecError::TooLarge { limit: n })?;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
        out.truncate(at + 4 + n);
    }
    Ok(())
}

/// Appends the decompressed snappy `src` (xerial-framed, or one raw block) to `out`, refusing
/// more than `limit` bytes.
pub fn snappy_decompress(src: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let start = out.len();
    let mut decoder = snap::raw::Decoder::new();
    let mut block = |raw: &[u8], out: &mut Vec<u8>| -> Result<(), CodecError> {
        let len = snap::raw::decompress_len(raw)
            .map_err(|e| CodecError::Corrupt(format!("snappy: {e}")))?;
        if out.len() - start + len > limit {
            return Err(CodecError::TooLarge { limit });
        }
        let at = out.len();
        out.resize(at + len, 0);
        let n = decoder
            .decompress(raw, &mut out[at..])
            .map_err(|e| CodecError::Corrupt(format!("snappy: {e}")))?;
        out.truncate(at + n);
        Ok(())
    };
    if !src.starts_with(&XERIAL_MAGIC) {
        return block(src, out);
    }
    let mut rest = src
        .get(XERIAL_HEADER_LEN..)
        .ok_or_else(|| CodecError::Corrupt("snappy: a framing header cut short".into()))?;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(|| {
            CodecError::Corrupt(format!(
                "snappy: {} bytes left, too few for a block length",
                rest.len()
            ))
        })?;
        let len = u32::from_be_bytes(*len) as usize;
        let raw = tail.get(..len).ok_or_else(|| {
            CodecError::Corrupt(format!(
                "snappy: a block of {len} bytes with {} left",
                tail.len()
            ))
        })?;
        block(raw, out)?;
        rest = &tail[len..];
    }
    Ok(())
}

/// Appends `src` to `out` as one LZ4 frame.
pub fn lz4_compress(src: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
    let mut encoder = lz4_flex::frame::FrameEncoder::new(out);
    encoder
        .write_all(src)
        .map_err(|e| CodecError::Corrupt(format!("LZ4: {e}")))?;
    encoder
        .finish()
        .map_err(|e| CodecError::Corrupt(format!("LZ4: {e}")))?;
    Ok(())
}

/// Appends the decompressed LZ4 frame(s) `src` to `out`, refusing more than `limit` bytes.
pub fn lz4_decompress(src: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let start = out.len();
    lz4_flex::frame::FrameDecoder::new(src)
        .take(limit as u64 + 1)
        .read_to_end(out)
        .map_err(|e| CodecError::Corrupt(format!("LZ4: {e}")))?;
    if out.len() - start > limit {
        return Err(CodecError::TooLarge { limit });
    }
    Ok(())
}

thread_local! {
    /// Each thread's Zstandard decompression context, reused batch after batch: creating one
    /// allocates and clears about 100 KiB, which cost more than decoding a small batch.
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Appends the decompressed Zstandard `src` to `out`, refusing more than `limit` bytes. A frame
/// that states its size is decoded in one call with the thread's reused context; one that does
/// not is read as a stream.
pub fn zstd_decompress(src: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), CodecError> {
    let start = out.len();
    let corrupt = |e: std::io::Error| CodecError::Corrupt(format!("Zstandard: {e}"));
    if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(src)
        && let Ok(size) = usize::try_from(size)
    {
        if size > limit {
            return Err(CodecError::TooLarge { limit });
        }
        // Only when the frame is all of `src`: concatenated frames go the streaming way.
        if zstd::zstd_safe::find_frame_compressed_size(src) == Ok(src.len()) {
            out.resize(start + size, 0);
            let n = ZSTD.with(|cell| {
                let mut slot = cell.borrow_mut();
                let context = match slot.as_mut() {
                    Some(context) => context,
                    None => slot.insert(zstd::bulk::Decompressor::new()?),
                };
                let result = context.decompress_to_buffer(src, &mut out[start..]);
                if result.is_err() {
                    // A fresh context after a refused frame: nothing of it carries over.
                    *slot = None;
                }
                result
            });
            let n = n.map_err(corrupt)?;
            if n != size {
                return Err(CodecError::Corrupt(format!(
                    "Zstandard: {n} bytes, the frame says {size}"
                )));
            }
            return Ok(());
        }
    }
    zstd::stream::read::Decoder::new(src)
        .map_err(corrupt)?
        .take(limit as u64 + 1)
        .read_to_end(out)
        .map_err(corrupt)?;
    if out.len() - start > limit {
        return Err(CodecError::TooLarge { limit });
    }
    Ok(())
}

/// Appends `src` compressed with `codec` to `out` (a copy for [`Compression::None`]). `zstd` is
/// the caller's reusable compression context, created on first use.
pub fn compress(
    codec: Compression,
    src: &[u8],
    out: &mut Vec<u8>,
    zstd: &mut Option<zstd::bulk::Compressor<'static>>,
) -> Result<(), CodecError> {
    match codec {
        Compression::None => out.extend_from_slice(src),
        Compression::Gzip => {
            gzip_compress(src, out).map_err(|e| CodecError::Corrupt(format!("gzip: {e}")))?
        }
        Compression::Snappy => snappy_compress(src, out)?,
        Compression::Lz4 => lz4_compress(src, out)?,
        Compression::Zstd => {
            let corrupt = |e: std::io::Error| CodecError::Corrupt(format!("Zstandard: {e}"));
            let context = match zstd {
                Some(context) => context,
                None => zstd.insert(zstd::bulk::Compressor::new(0).map_err(corrupt)?),
            };
            let at = out.len();
            out.resize(at + zstd::zstd_safe::compress_bound(src.len()), 0);
            let n = context
                .compress_to_buffer(src, &mut out[at..])
                .map_err(corrupt)?;
            out.truncate(at + n);
        }
    }
    Ok(())
}

/// Appends `src` decompressed with `codec` to `out`, refusing more than `limit` bytes.
pub fn decompress(
    codec: Compression,
    src: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), CodecError> {
    match codec {
        Compression::None => {
            if src.len() > limit {
                return Err(CodecError::TooLarge { limit });
            }
            out.extend_from_slice(src);
            Ok(())
        }
        Compression::Gzip => gzip_decompress(src, out, limit),
        Compression::Snappy => snappy_decompress(src, out, limit),
        Compression::Lz4 => lz4_decompress(src, out, limit),
        Compression::Zstd => zstd_decompress(src, out, limit),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_reused_zstd_context_decodes_after_refusing_a_damaged_frame() {
        let plain: Vec<u8> = (0..10_000u32)
            .flat_map(|i| (i % 251).to_be_bytes())
            .collect();
        let frame = zstd::bulk::compress(&plain, 3).expect("compress");
        for round in 0..3 {
            let mut out = Vec::new();
            zstd_decompress(&frame, &mut out, 1 << 20).expect("decodes");
            assert_eq!(out, plain, "round {round}");
            let mut damaged = frame.clone();
            let mid = damaged.len() / 2;
            damaged[mid] ^= 0xff;
            damaged.truncate(mid + 3);
            assert!(
                zstd_decompress(&damaged, &mut Vec::new(), 1 << 20).is_err(),
                "a cut frame is refused"
            );
        }
        let mut stream = zstd::stream::write::Encoder::new(Vec::new(), 0).expect("encoder");
        stream.write_all(&plain).expect("write");
        let unsized_frame = stream.finish().expect("finish");
        let mut out = Vec::new();
        zstd_decompress(&unsized_frame, &mut out, 1 << 20).expect("a stream without a size");
        assert_eq!(out, plain);
        assert!(matches!(
            zstd_decompress(&frame, &mut Vec::new(), 100),
            Err(CodecError::TooLarge { limit: 100 })
        ));
    }

    #[test]
    fn every_codec_round_trips_and_stops_at_the_limit() {
        let plain: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 97).to_be_bytes())
            .collect();
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut packed = Vec::new();
            compress(codec, &plain, &mut packed, &mut None).expect("compress");
            let mut out = Vec::new();
            decompress(codec, &packed, &mut out, plain.len()).expect("decompress");
            assert_eq!(out, plain, "{codec:?}");
            assert!(
                decompress(codec, &packed, &mut Vec::new(), plain.len() - 1).is_err(),
                "{codec:?} over the limit"
            );
        }
    }

    proptest! {
        /// Both codecs give back what they were given, in any size (snappy across blocks).
        #[test]
        fn gzip_and_snappy_round_trip(
            data in proptest::collection::vec(any::<u8>(), 0..100_000),
            repeats in 1usize..4,
        ) {
            let data = data.repeat(repeats);
            let (mut z, mut s) = (Vec::new(), Vec::new());
            prop_assert!(gzip_compress(&data, &mut z).is_ok());
            prop_assert!(snappy_compress(&data, &mut s).is_ok());
            let (mut back_z, mut back_s) = (Vec::new(), Vec::new());
            prop_assert!(gzip_decompress(&z, &mut back_z, data.len()).is_ok());
            prop_assert!(snappy_decompress(&s, &mut back_s, data.len()).is_ok());
            prop_assert_eq!(&back_z, &data);
            prop_assert_eq!(&back_s, &data);
        }

        /// Damaged input is an error, never a panic.
        #[test]
        fn damaged_payloads_are_errors_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut out = Vec::new();
            let _ = gzip_decompress(&bytes, &mut out, 1 << 20);
            out.clear();
            let _ = snappy_decompress(&bytes, &mut out, 1 << 20);
            let mut framed = XERIAL_MAGIC.to_vec();
            framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
            framed.extend_from_slice(&bytes);
            out.clear();
            let _ = snappy_decompress(&framed, &mut out, 1 << 20);
        }
    }

    #[test]
    fn a_raw_snappy_block_without_framing_is_read_too() {
        let data = b"hello hello hello hello, snappy".repeat(20);
        let raw = snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("compress");
        let mut out = Vec::new();
        snappy_decompress(&raw, &mut out, 1 << 20).expect("raw block");
        assert_eq!(out, data);
    }

    #[test]
    fn the_xerial_header_is_snappy_javas() {
        let mut out = Vec::new();
        snappy_compress(b"abc", &mut out).expect("compress");
        assert_eq!(&out[..8], &XERIAL_MAGIC);
        assert_eq!(
            &out[8..16],
            &[0, 0, 0, 1, 0, 0, 0, 1],
            "version 1, compatible 1"
        );
        let len = u32::from_be_bytes([out[16], out[17], out[18], out[19]]) as usize;
        assert_eq!(out.len(), 20 + len, "one block");
    }

    #[test]
    fn decompressing_beyond_the_limit_is_refused() {
        let data = vec![7u8; 200_000];
        let (mut z, mut s) = (Vec::new(), Vec::new());
        gzip_compress(&data, &mut z).expect("gzip");
        snappy_compress(&data, &mut s).expect("snappy");
        let mut out = Vec::new();
        assert!(matches!(
            gzip_decompress(&z, &mut out, 1000),
            Err(CodecError::TooLarge { limit: 1000 })
        ));
        out.clear();
        assert!(matches!(
            snappy_decompress(&s, &mut out, 1000),
            Err(CodecError::TooLarge { limit: 1000 })
        ));
    }

    #[test]
    fn a_cut_frame_names_what_is_missing() {
        let mut s = Vec::new();
        snappy_compress(&[1u8; 1000], &mut s).expect("snappy");
        let mut out = Vec::new();
        let err = snappy_decompress(&s[..s.len() - 3], &mut out, 1 << 20)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("left")),
            "{err:?}"
        );
    }
}
