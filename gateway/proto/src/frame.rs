//! UACP framing: splits a byte stream into whole frames, checking each
//! frame's declared size against the limit *before* any of its body is
//! buffered, so a peer can never make us allocate more than the limit.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::ProtoError;

/// Size of the common UACP frame header (type, chunk type, size).
pub const HEADER_LEN: usize = 8;

/// The kinds of frame that travel over opc.tcp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// HEL: the client's first message.
    Hello,
    /// ACK: the server's answer to Hello.
    Acknowledge,
    /// ERR: a fatal error, followed by a close.
    Error,
    /// RHE: reverse hello (server to client); never valid towards a server.
    ReverseHello,
    /// OPN: OpenSecureChannel request or response.
    Open,
    /// CLO: CloseSecureChannel.
    Close,
    /// MSG: a service message chunk.
    Message,
}

impl FrameKind {
    /// Name used in log lines and "unexpected" errors.
    pub fn name(self) -> &'static str {
        match self {
            FrameKind::Hello => "Hello",
            FrameKind::Acknowledge => "Acknowledge",
            FrameKind::Error => "Error",
            FrameKind::ReverseHello => "ReverseHello",
            FrameKind::Open => "OpenSecureChannel",
            FrameKind::Close => "CloseSecureChannel",
            FrameKind::Message => "Message",
        }
    }

    fn parse(tag: [u8; 3]) -> Result<Self, ProtoError> {
        Ok(match &tag {
            b"HEL" => FrameKind::Hello,
            b"ACK" => FrameKind::Acknowledge,
            b"ERR" => FrameKind::Error,
            b"RHE" => FrameKind::ReverseHello,
            b"OPN" => FrameKind::Open,
            b"CLO" => FrameKind::Close,
            b"MSG" => FrameKind::Message,
            _ => return Err(ProtoError::UnknownMessageType(tag)),
        })
    }
}

/// Whether a chunk ends its message, continues it or aborts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkType {
    /// 'F': the last (or only) chunk.
    Final,
    /// 'C': more chunks follow.
    Intermediate,
    /// 'A': the sender abandons the message.
    Abort,
}

/// One complete frame, header included.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The message type from the header.
    pub kind: FrameKind,
    /// The chunk type from the header.
    pub chunk: ChunkType,
    /// The whole frame, header included (the security layer needs it all).
    pub bytes: Bytes,
}

/// Accumulates received bytes and yields complete frames.
///
/// Called by the connection state machine whenever the transport delivers
/// bytes. The limit can be changed after the Hello has been negotiated.
#[derive(Debug)]
pub struct FrameReader {
    buf: BytesMut,
    limit: u32,
}

impl FrameReader {
    /// A reader that refuses frames larger than `limit` bytes.
    pub fn new(limit: u32) -> Self {
        FrameReader {
            buf: BytesMut::new(),
            limit,
        }
    }

    /// Sets the largest frame accepted from now on (the negotiated receive buffer size).
    pub fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    /// Bytes received but not yet part of a complete frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Appends received bytes. The caller then drains frames with [`FrameReader::next_frame`].
    /// Memory stays bounded because `next_frame` rejects a header whose size
    /// exceeds the limit as soon as the header is complete.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame, `Ok(None)` if more bytes are needed, or an
    /// error if the header is invalid or announces a frame over the limit.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, ProtoError> {
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let tag = [self.buf[0], self.buf[1], self.buf[2]];
        let kind = FrameKind::parse(tag)?;
        let chunk = match (kind, self.buf[3]) {
            (_, b'F') => ChunkType::Final,
            (FrameKind::Message, b'C') => ChunkType::Intermediate,
            (FrameKind::Message, b'A') => ChunkType::Abort,
            (kind, other) => {
                return Err(ProtoError::InvalidChunkType {
                    kind: kind.name(),
                    chunk: other,
                })
            }
        };
        let size = u32::from_le_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
        if (size as usize) < HEADER_LEN {
            return Err(ProtoError::FrameTooSmall(size));
        }
        if size > self.limit {
            return Err(ProtoError::FrameTooLarge {
                size,
                limit: self.limit,
            });
        }
        if self.buf.len() < size as usize {
            // Reserve at most what the (already bounded) frame still needs.
            self.buf.reserve(size as usize - self.buf.len());
            return Ok(None);
        }
        let bytes = self.buf.split_to(size as usize).freeze();
        Ok(Some(Frame { kind, chunk, bytes }))
    }
}

/// Reads a little-endian u32 at `offset` of a frame, if present.
pub(crate) fn read_u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let mut s = bytes.get(offset..offset + 4)?;
    Some(s.get_u32_le())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: &[u8; 3], chunk: u8, body: &[u8]) -> Vec<u8> {
        let mut v = tag.to_vec();
        v.push(chunk);
        v.extend_from_slice(&((body.len() + HEADER_LEN) as u32).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn splits_frames_delivered_byte_by_byte() {
        let mut r = FrameReader::new(1024);
        let mut data = frame(b"HEL", b'F', &[1, 2, 3]);
        data.extend(frame(b"MSG", b'C', &[4; 10]));
        let mut got = Vec::new();
        for b in data {
            r.push(&[b]);
            while let Some(f) = r.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].kind, FrameKind::Hello);
        assert_eq!(got[0].bytes.len(), 11);
        assert_eq!(got[1].chunk, ChunkType::Intermediate);
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn oversized_declared_length_is_refused_before_buffering() {
        let mut r = FrameReader::new(8192);
        let mut h = b"MSGF".to_vec();
        h.extend_from_slice(&u32::MAX.to_le_bytes());
        r.push(&h);
        assert_eq!(
            r.next_frame().unwrap_err(),
            ProtoError::FrameTooLarge {
                size: u32::MAX,
                limit: 8192
            }
        );
        assert!(r.buf.capacity() < 1 << 16);
    }

    #[test]
    fn bad_type_and_chunk_bytes_are_refused() {
        let mut r = FrameReader::new(8192);
        r.push(&frame(b"XYZ", b'F', &[]));
        assert!(matches!(
            r.next_frame(),
            Err(ProtoError::UnknownMessageType(_))
        ));
        let mut r = FrameReader::new(8192);
        r.push(&frame(b"HEL", b'C', &[]));
        assert!(matches!(
            r.next_frame(),
            Err(ProtoError::InvalidChunkType { .. })
        ));
        let mut r = FrameReader::new(8192);
        let mut h = b"MSGF".to_vec();
        h.extend_from_slice(&3u32.to_le_bytes());
        r.push(&h);
        assert_eq!(r.next_frame().unwrap_err(), ProtoError::FrameTooSmall(3));
    }
}
