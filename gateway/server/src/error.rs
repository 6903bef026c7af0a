//! The service layer's error type and its one mapping to StatusCodes.

use opcua_types::StatusCode;

/// Why a service request (or one of its operations) failed. Mapped to
/// the wire status in [`ServiceError::status`]; the Display text is for
/// logs only.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The authentication token names no session.
    #[error("no session for this authentication token")]
    SessionIdInvalid,
    /// The session exists but was never activated.
    #[error("session not activated")]
    SessionNotActivated,
    /// The session belongs to another secure channel.
    #[error("session is bound to another secure channel")]
    WrongChannel,
    /// MaxSessionCount reached.
    #[error("too many sessions")]
    TooManySessions,
    /// Too many operations in one request.
    #[error("too many operations: {got} > {limit}")]
    TooManyOperations { got: usize, limit: u32 },
    /// The request contains no operations.
    #[error("nothing to do")]
    NothingToDo,
    /// The service is not implemented.
    #[error("service not supported")]
    Unsupported,
    /// The client nonce is missing or too short.
    #[error("client nonce invalid")]
    NonceInvalid,
    /// The client certificate is not the channel's, or invalid.
    #[error("client certificate invalid")]
    CertificateInvalid,
    /// The ApplicationUri does not match the certificate.
    #[error("application uri does not match the certificate")]
    CertificateUriInvalid,
    /// The client's signature over our certificate and nonce is wrong.
    #[error("application signature invalid")]
    ApplicationSignatureInvalid,
    /// The identity token is malformed or not offered on this endpoint.
    #[error("identity token invalid: {0}")]
    IdentityTokenInvalid(&'static str),
    /// The identity token is well-formed but its certificate is not trusted.
    #[error("identity token rejected")]
    IdentityTokenRejected,
    /// Wrong user name or password.
    #[error("user access denied")]
    UserAccessDenied,
    /// The user token signature is wrong.
    #[error("user signature invalid")]
    UserSignatureInvalid,
    /// The security policy of the request is not offered.
    #[error("security policy rejected")]
    SecurityPolicyRejected,
    /// The identity of a transferred session may not change.
    #[error("identity change not supported on transfer")]
    IdentityChangeNotSupported,
    /// A service-level status decided by the address space or a check.
    #[error("service result {0}")]
    Status(StatusCode),
    /// Something on our side failed (store, crypto); details are logged only.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ServiceError {
    /// The status code the client sees. The one place this mapping lives.
    pub fn status(&self) -> StatusCode {
        match self {
            ServiceError::SessionIdInvalid => StatusCode::BadSessionIdInvalid,
            ServiceError::SessionNotActivated => StatusCode::BadSessionNotActivated,
            ServiceError::WrongChannel => StatusCode::BadSecureChannelIdInvalid,
            ServiceError::TooManySessions => StatusCode::BadTooManySessions,
            ServiceError::TooManyOperations { .. } => StatusCode::BadTooManyOperations,
            ServiceError::NothingToDo => StatusCode::BadNothingToDo,
            ServiceError::Unsupported => StatusCode::BadServiceUnsupported,
            ServiceError::NonceInvalid => StatusCode::BadNonceInvalid,
            ServiceError::CertificateInvalid => StatusCode::BadCertificateInvalid,
            ServiceError::CertificateUriInvalid => StatusCode::BadCertificateUriInvalid,
            ServiceError::ApplicationSignatureInvalid => StatusCode::BadApplicationSignatureInvalid,
            ServiceError::IdentityTokenInvalid(_) => StatusCode::BadIdentityTokenInvalid,
            ServiceError::IdentityTokenRejected => StatusCode::BadIdentityTokenRejected,
            ServiceError::UserAccessDenied => StatusCode::BadUserAccessDenied,
            ServiceError::UserSignatureInvalid => StatusCode::BadUserSignatureInvalid,
            ServiceError::SecurityPolicyRejected => StatusCode::BadSecurityPolicyRejected,
            ServiceError::IdentityChangeNotSupported => StatusCode::BadIdentityChangeNotSupported,
            ServiceError::Status(s) => *s,
            ServiceError::Internal(_) => StatusCode::BadInternalError,
        }
    }
}

/// Errors starting the gateway (data dir, certificate, listener).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The data directory or PKI could not be prepared.
    #[error("data directory: {0}")]
    DataDir(String),
    /// The configuration cannot be planned (resource isolation); names the setting.
    #[error("configuration cannot be planned: {0}")]
    Plan(String),
    /// The TLS certificate of the opc.wss/opc.https listener is unusable.
    #[error("TLS certificate: {0}")]
    Tls(String),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}
