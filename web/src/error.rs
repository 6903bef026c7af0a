//! The REST API's one error type and its JSON form.
//!
//! Every failed `/api/v1` call answers with a status and a body
//! `{"code": "...", "message": "...", "field": "..."}`. `code` is stable
//! (scripts branch on it); `message` is for people; `field` names the
//! offending setting or request field when there is one. Internal details
//! (database errors, paths) are logged, never sent.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// Why an API call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// No valid token (missing, malformed, expired, or a wrong signature).
    #[error("authentication required")]
    Unauthenticated,
    /// Wrong user name or password.
    #[error("wrong user name or password")]
    BadCredentials,
    /// Too many failed logins for this user or address; retry later.
    #[error("too many failed logins; retry {}", retry_in(*retry_after_s))]
    Throttled {
        /// Seconds until another attempt is accepted.
        retry_after_s: u64,
    },
    /// The caller's role may not do this.
    #[error("the {role} role may not do this")]
    Forbidden {
        /// The caller's role.
        role: &'static str,
    },
    /// First-start setup with a code that is not the one-time setup code,
    /// or after it was spent (an administrator exists).
    #[error("wrong or expired setup code")]
    SetupCode,
    /// The request or the document it carries is invalid.
    #[error("{message}")]
    Invalid {
        /// The offending setting or request field, when known.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The named thing does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The thing to create exists already.
    #[error("{0}")]
    Conflict(String),
    /// The request body is larger than the operation accepts.
    #[error("{0}")]
    TooLarge(String),
    /// A state-changing browser request without the session's CSRF token,
    /// or from another origin.
    #[error("missing or wrong CSRF token, or a request from another site")]
    Csrf,
    /// A configuration change on a pair member that is not the leader:
    /// made on the leader's console instead.
    #[error("{message}")]
    NotLeader {
        /// Names the leader.
        message: String,
        /// The leader's console URL, when known.
        leader_console: Option<String>,
    },
    /// The pair did not acknowledge the change (this appliance is cut off
    /// from a quorum): not in force, but it may still commit if this
    /// leader regains a quorum before another is elected.
    #[error("{0}")]
    NotAcknowledged(String),
    /// Something failed inside the gateway; details are in the log.
    #[error("internal error")]
    Internal,
}

impl From<uagate_store::StoreError> for ApiError {
    /// The store's refusals keep their meaning (422 naming the field, 404,
    /// 409); anything else is an internal error.
    fn from(e: uagate_store::StoreError) -> ApiError {
        use uagate_store::StoreError;
        match e {
            StoreError::Invalid { setting, message } => ApiError::invalid(setting, message),
            StoreError::UnknownUser(name) => ApiError::NotFound(format!("no user named {name:?}")),
            StoreError::UserExists(name) => {
                ApiError::Conflict(format!("user {name:?} already exists"))
            }
            e @ StoreError::NotLeader { .. } => {
                let leader_console = match &e {
                    StoreError::NotLeader { console, .. } => console.clone(),
                    _ => None,
                };
                ApiError::NotLeader {
                    message: e.to_string(),
                    leader_console,
                }
            }
            StoreError::NotAcknowledged(m) => ApiError::NotAcknowledged(m),
            other => ApiError::internal(other),
        }
    }
}

impl From<uagate_system::SystemError> for ApiError {
    /// Off the appliance, or while an update runs: 409 with the system's
    /// message; a bundle too large: 413; anything else is internal.
    fn from(e: uagate_system::SystemError) -> ApiError {
        use uagate_system::SystemError;
        match e {
            e @ (SystemError::NotOnAppliance { .. }
            | SystemError::Busy
            | SystemError::Install { .. }) => ApiError::Conflict(e.to_string()),
            e @ SystemError::TooLarge { .. } => ApiError::TooLarge(e.to_string()),
            other => ApiError::internal(other),
        }
    }
}

/// When to retry, in words: "in 5 minutes", "in 40 s".
fn retry_in(seconds: u64) -> String {
    match seconds {
        0..=59 => format!("in {seconds} s"),
        60..=119 => "in a minute".to_string(),
        s => format!("in {} minutes", s.div_ceil(60)),
    }
}

/// A login locked out by the shared throttle: 429 with `Retry-After`.
impl From<uagate_server::throttle::Locked> for ApiError {
    fn from(l: uagate_server::throttle::Locked) -> ApiError {
        ApiError::Throttled {
            retry_after_s: l.retry_after.as_secs().max(1),
        }
    }
}

impl ApiError {
    /// The offending setting or request field of an invalid request, when
    /// known.
    pub fn field(&self) -> Option<&str> {
        match self {
            ApiError::Invalid { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    /// An invalid request naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::Invalid {
            field: Some(field.into()),
            message: message.into(),
        }
    }

    /// Logs `err` and answers with a bare internal error.
    pub fn internal(err: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %err, "console request failed");
        ApiError::Internal
    }

    /// The HTTP status and the stable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ApiError::BadCredentials => (StatusCode::UNAUTHORIZED, "bad_credentials"),
            ApiError::Throttled { .. } => (StatusCode::TOO_MANY_REQUESTS, "throttled"),
            ApiError::Forbidden { .. } | ApiError::SetupCode => {
                (StatusCode::FORBIDDEN, "forbidden")
            }
            ApiError::Csrf => (StatusCode::FORBIDDEN, "csrf"),
            ApiError::Invalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ApiError::NotLeader { .. } => (StatusCode::CONFLICT, "not_leader"),
            ApiError::NotAcknowledged(_) => (StatusCode::SERVICE_UNAVAILABLE, "not_acknowledged"),
            ApiError::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

/// The JSON body of an error.
#[derive(Debug, Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
    /// With `not_leader`: where the change can be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    leader_console: Option<&'a str>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let field = match &self {
            ApiError::Invalid { field, .. } => field.as_deref(),
            _ => None,
        };
        let leader_console = match &self {
            ApiError::NotLeader { leader_console, .. } => leader_console.as_deref(),
            _ => None,
        };
        let body = ErrorBody {
            code,
            message: self.to_string(),
            field,
            leader_console,
        };
        let mut response = (status, Json(body)).into_response();
        if let ApiError::Throttled { retry_after_s } = self {
            if let Ok(v) = axum::http::HeaderValue::from_str(&retry_after_s.to_string()) {
                response
                    .headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, v);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lockout says when to retry in minutes, not "299 s".
    #[test]
    fn a_lockout_says_when_in_words() {
        let said = |s| ApiError::Throttled { retry_after_s: s }.to_string();
        assert_eq!(said(299), "too many failed logins; retry in 5 minutes");
        assert_eq!(said(61), "too many failed logins; retry in a minute");
        assert_eq!(said(40), "too many failed logins; retry in 40 s");
    }
}
