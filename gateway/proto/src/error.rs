//! The protocol layer's error type and its one mapping to OPC UA status codes.

use opcua_types::StatusCode;

/// Everything that can go wrong while framing, securing or reassembling a
/// connection's traffic. Each variant maps to exactly one StatusCode in
/// [`ProtoError::status`]; that code is what the peer sees in the Error
/// message before the connection is closed. The `Display` text is for logs
/// only and never goes on the wire.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The three-byte message type is not one the protocol defines.
    #[error("unknown message type {0:?}")]
    UnknownMessageType([u8; 3]),
    /// The chunk type byte is not F, C or A, or is not allowed for this message type.
    #[error("invalid chunk type {chunk:?} for {kind}")]
    InvalidChunkType { kind: &'static str, chunk: u8 },
    /// The declared frame size is smaller than the frame's own header.
    #[error("declared frame size {0} is below the minimum")]
    FrameTooSmall(u32),
    /// The declared frame size exceeds the negotiated receive buffer.
    #[error("declared frame size {size} exceeds the limit {limit}")]
    FrameTooLarge { size: u32, limit: u32 },
    /// The reassembled message would exceed MaxMessageSize.
    #[error("message exceeds the negotiated MaxMessageSize {limit}")]
    MessageTooLarge { limit: u32 },
    /// The message has more chunks than MaxChunkCount.
    #[error("message exceeds the negotiated MaxChunkCount {limit}")]
    TooManyChunks { limit: u32 },
    /// A message arrived that the current state does not accept.
    #[error("unexpected {got} while {state}: expected {expected}")]
    Unexpected {
        state: &'static str,
        expected: &'static str,
        got: &'static str,
    },
    /// The Hello's buffer sizes are below the 8192-byte minimum of Part 6.
    #[error("hello buffer sizes below the protocol minimum")]
    InvalidBufferSizes,
    /// The client asked for a protocol version newer than ours.
    #[error("protocol version {0} is not supported")]
    ProtocolVersion(u32),
    /// The Hello's endpoint URL is missing, too long or not opc.tcp.
    #[error("invalid endpoint url in hello")]
    EndpointUrlInvalid,
    /// The handshake (Hello and OpenSecureChannel) did not finish in time.
    #[error("handshake did not complete before the deadline")]
    HandshakeTimeout,
    /// The channel's security token expired without a renewal.
    #[error("security token expired")]
    TokenExpired,
    /// A message named a secure channel that is not this one.
    #[error("secure channel id {0} is not this channel")]
    ChannelIdInvalid(u32),
    /// The bytes could not be decoded (bad lengths, depth, UTF-8, ...).
    #[error("decoding failed: {0}")]
    Decoding(String),
    /// A service request whose header decoded but whose body did not (an
    /// IndexRange that is not a range, an enumeration value out of range).
    /// The request is answered with a ServiceFault and the channel stays
    /// open: the bytes were framed and secured correctly, only the request
    /// is wrong.
    #[error("request {request_handle} not decodable: {detail}")]
    RequestUndecodable { request_handle: u32, detail: String },
    /// A signature, decryption, nonce or sequence check failed; the status is the precise one.
    #[error("security check failed: {0}")]
    Security(StatusCode),
    /// The requested security policy is not one the server offers.
    #[error("security policy rejected")]
    PolicyRejected,
    /// The requested security mode is invalid or not offered with that policy.
    #[error("security mode rejected")]
    ModeRejected,
    /// The engine refused to open the channel (for example an untrusted certificate).
    #[error("open refused by the server: {0}")]
    Refused(StatusCode),
    /// A response could not be encoded within the negotiated limits.
    #[error("response could not be encoded: {0}")]
    Encoding(StatusCode),
    /// An intermediate chunk did not fit the reassembly budget
    /// (ReassemblyBytes); the partial message is discarded.
    #[error("chunk of {requested} bytes does not fit the reassembly budget ({retained} bytes retained for this message)")]
    ReassemblyBudgetExceeded { requested: usize, retained: usize },
    /// No Handshake capacity was free to process an OpenSecureChannel(Renew).
    #[error("no handshake capacity for a token renewal")]
    RenewRefused,
}

impl ProtoError {
    /// The status code sent to the peer for this error. This is the one
    /// place where protocol errors become OPC UA status codes.
    pub fn status(&self) -> StatusCode {
        match self {
            ProtoError::UnknownMessageType(_)
            | ProtoError::InvalidChunkType { .. }
            | ProtoError::Unexpected { .. } => StatusCode::BadTcpMessageTypeInvalid,
            ProtoError::FrameTooSmall(_) => StatusCode::BadDecodingError,
            ProtoError::FrameTooLarge { .. }
            | ProtoError::MessageTooLarge { .. }
            | ProtoError::TooManyChunks { .. } => StatusCode::BadTcpMessageTooLarge,
            ProtoError::InvalidBufferSizes => StatusCode::BadTcpInternalError,
            ProtoError::ProtocolVersion(_) => StatusCode::BadProtocolVersionUnsupported,
            ProtoError::EndpointUrlInvalid => StatusCode::BadTcpEndpointUrlInvalid,
            ProtoError::HandshakeTimeout => StatusCode::BadTimeout,
            ProtoError::TokenExpired => StatusCode::BadSecureChannelTokenUnknown,
            ProtoError::ChannelIdInvalid(_) => StatusCode::BadTcpSecureChannelUnknown,
            ProtoError::Decoding(_) | ProtoError::RequestUndecodable { .. } => {
                StatusCode::BadDecodingError
            }
            ProtoError::Security(s) | ProtoError::Refused(s) | ProtoError::Encoding(s) => *s,
            ProtoError::PolicyRejected => StatusCode::BadSecurityPolicyRejected,
            ProtoError::ModeRejected => StatusCode::BadSecurityModeRejected,
            ProtoError::ReassemblyBudgetExceeded { .. } | ProtoError::RenewRefused => {
                StatusCode::BadTcpNotEnoughResources
            }
        }
    }
}

impl From<opcua_types::Error> for ProtoError {
    fn from(e: opcua_types::Error) -> Self {
        let status = e.status();
        if status == StatusCode::BadDecodingError || status == StatusCode::BadEncodingLimitsExceeded
        {
            ProtoError::Decoding(e.to_string())
        } else {
            ProtoError::Security(status)
        }
    }
}
