//! REST handlers for trusted owners, ingress rules and the trust lists:
//! JSON in and out, the work done by [`crate::ops`] exactly as for the
//! console's forms.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use uagate_config::{IngressRule, TrustedOwner};
use uagate_store::{CertInfo, CertKind, CertSummary};

use crate::api::json_error;
use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops::{self, ConfigChange};
use crate::state::WebState;

/// `GET /api/v1/owners`: the configured trusted owners.
pub async fn owners(State(state): State<WebState>) -> Result<Json<Vec<TrustedOwner>>, ApiError> {
    Ok(Json(
        ops::stored_config(&state).await?.isolation.trusted_owners,
    ))
}

/// `POST /api/v1/owners` body: a trusted owner and, optionally, address
/// ranges to map to it (added as ingress rules in the same change).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnerRequest {
    /// The owner key.
    pub key: String,
    /// Scheduling weight (1-1000), default 1.
    #[serde(default)]
    pub weight: Option<u32>,
    /// Per-stage reserves: `{stage, reserved, hard_limit?}`.
    #[serde(default)]
    #[schemars(with = "Vec<serde_json::Map<String, serde_json::Value>>")]
    pub reservations: Vec<uagate_config::Reservation>,
    /// CIDRs whose callers belong to this owner.
    #[serde(default)]
    pub ingress: Vec<String>,
}

/// `POST /api/v1/owners`: adds a trusted owner or replaces the one with
/// the same key (with its ingress rules); 422 naming the setting when the
/// plan refuses it.
pub async fn owner_put(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<OwnerRequest>, JsonRejection>,
) -> Result<Json<ConfigChange>, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    let owner = TrustedOwner {
        key: req.key,
        weight: req.weight.unwrap_or(1),
        reservations: req.reservations,
    };
    Ok(Json(
        ops::upsert_owner(&state, &who, owner, req.ingress).await?,
    ))
}

/// `DELETE /api/v1/owners/{key}`.
pub async fn owner_delete(
    State(state): State<WebState>,
    who: Authed,
    Path(key): Path<String>,
) -> Result<Json<ConfigChange>, ApiError> {
    Ok(Json(ops::remove_owner(&state, &who, &key).await?))
}

/// `GET /api/v1/ingress`: the ingress rules in document order (the index
/// is what `DELETE` takes).
pub async fn ingress(State(state): State<WebState>) -> Result<Json<Vec<IngressRule>>, ApiError> {
    Ok(Json(ops::stored_config(&state).await?.isolation.ingress))
}

/// `POST /api/v1/ingress`: appends a rule `{cidr, owner | class}`.
pub async fn ingress_add(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<IngressRule>, JsonRejection>,
) -> Result<Json<ConfigChange>, ApiError> {
    let Json(rule) = body.map_err(json_error)?;
    Ok(Json(ops::add_ingress(&state, &who, rule).await?))
}

/// `DELETE /api/v1/ingress/{index}`.
pub async fn ingress_delete(
    State(state): State<WebState>,
    who: Authed,
    Path(index): Path<usize>,
) -> Result<Json<ConfigChange>, ApiError> {
    Ok(Json(ops::remove_ingress(&state, &who, index).await?))
}

/// A certificate in the REST answers (the DER is left out; fetch nothing
/// secret, and keep answers small).
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CertView {
    /// SHA-1 thumbprint, lowercase hex.
    pub thumbprint: String,
    /// trusted, issuer or rejected.
    pub kind: String,
    /// Subject DN.
    pub subject: String,
    /// Application URI from the subjectAltName.
    pub application_uri: Option<String>,
    /// Start of validity (RFC 3339).
    pub not_before: String,
    /// End of validity (RFC 3339).
    pub not_after: String,
    /// First seen by the store (RFC 3339).
    pub first_seen: String,
    /// Last presented (rejected list) or last added (RFC 3339).
    pub last_seen: String,
    /// Rejected list: whether this appliance refused it itself (false when
    /// only the other appliance of the pair did).
    pub refused_here: bool,
    /// Rejected list: the pair address of the other appliance that refused
    /// it and reported it here; absent if none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_by: Option<String>,
    /// Rejected list of a paired appliance: refused here and not on the
    /// primary's list yet (the report waits for the primary).
    pub report_pending: bool,
}

impl From<CertInfo> for CertView {
    fn from(c: CertInfo) -> CertView {
        CertView {
            thumbprint: c.thumbprint,
            kind: c.kind.as_str().to_string(),
            subject: c.subject,
            application_uri: c.application_uri,
            not_before: c.not_before,
            not_after: c.not_after,
            first_seen: c.first_seen,
            last_seen: c.last_seen,
            refused_here: c.refused_here,
            refused_by: c.refused_by,
            report_pending: c.report_pending,
        }
    }
}

/// `GET /api/v1/certificates` answer.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Certificates {
    /// The appliance's OPC UA application instance certificate:
    /// thumbprint, subject, application_uri, not_before, not_after.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub application: Option<CertSummary>,
    /// SHA-256 fingerprint of the TLS certificate in service.
    pub tls_fingerprint: Option<String>,
    /// Trusted peers.
    pub trusted: Vec<CertView>,
    /// Issuers (CAs).
    pub issuers: Vec<CertView>,
    /// Rejected peers awaiting a decision, most recent first.
    pub rejected: Vec<CertView>,
    /// Stored CRLs.
    pub crls: usize,
}

/// `GET /api/v1/certificates`.
pub async fn certificates(State(state): State<WebState>) -> Result<Json<Certificates>, ApiError> {
    let list = |k| {
        let store = state.store.clone();
        async move {
            Ok::<_, ApiError>(
                store
                    .certs(k)
                    .await?
                    .into_iter()
                    .map(CertView::from)
                    .collect::<Vec<_>>(),
            )
        }
    };
    Ok(Json(Certificates {
        application: uagate_store::describe_certificate(&state.engine.application_certificate())
            .ok(),
        tls_fingerprint: state.engine.tls_certificate().map(|t| t.fingerprint),
        trusted: list(CertKind::Trusted).await?,
        issuers: list(CertKind::Issuer).await?,
        rejected: list(CertKind::Rejected).await?,
        crls: state.store.crls().await?.len(),
    }))
}

/// `POST /api/v1/certificates?kind=trusted|issuer` query.
#[derive(Debug, Deserialize)]
pub struct KindQuery {
    /// trusted (default) or issuer.
    #[serde(default)]
    pub kind: Option<String>,
}

/// `POST /api/v1/certificates?kind=`: the body is a DER or PEM
/// certificate.
pub async fn certificate_add(
    State(state): State<WebState>,
    who: Authed,
    Query(q): Query<KindQuery>,
    body: Bytes,
) -> Result<(StatusCode, Json<CertView>), ApiError> {
    let kind = q.kind.as_deref().unwrap_or("trusted");
    let c = ops::add_certificate(&state, &who, &body, kind).await?;
    Ok((StatusCode::CREATED, Json(c.into())))
}

/// `POST /api/v1/certificates/{thumbprint}/trust`: trusts a rejected
/// certificate.
pub async fn certificate_trust(
    State(state): State<WebState>,
    who: Authed,
    Path(thumbprint): Path<String>,
) -> Result<Json<CertView>, ApiError> {
    Ok(Json(
        ops::trust_rejected(&state, &who, &thumbprint).await?.into(),
    ))
}

/// `DELETE /api/v1/certificates/{thumbprint}`: removes it from its list.
pub async fn certificate_delete(
    State(state): State<WebState>,
    who: Authed,
    Path(thumbprint): Path<String>,
) -> Result<StatusCode, ApiError> {
    ops::remove_certificate(&state, &who, &thumbprint).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One stored CRL in `GET /api/v1/crls`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrlView {
    /// The CA that issued it; one CRL per CA is kept.
    pub issuer: String,
    /// SHA-1 of its DER encoding, lowercase hex.
    pub thumbprint: String,
    /// When the CA issued it (RFC 3339 UTC).
    pub this_update: String,
    /// When the CA promised the next one (RFC 3339 UTC), if it says.
    pub next_update: Option<String>,
    /// How many certificates it revokes.
    pub revoked: usize,
    /// `current`, `due_soon` (next update within 7 days) or `out_of_date`
    /// (the certificates that CA issued are refused until a newer CRL is
    /// stored).
    pub state: String,
}

/// `GET /api/v1/crls`: the stored CRLs and where each stands.
pub async fn crls(State(state): State<WebState>) -> Result<Json<Vec<CrlView>>, ApiError> {
    let now = chrono::Utc::now();
    Ok(Json(
        state
            .store
            .crl_infos()
            .await?
            .into_iter()
            .map(|c| CrlView {
                state: ops::crl_state(c.next_update.as_deref(), now)
                    .0
                    .as_str()
                    .to_string(),
                issuer: c.issuer,
                thumbprint: c.thumbprint,
                this_update: c.this_update,
                next_update: c.next_update,
                revoked: c.revoked,
            })
            .collect(),
    ))
}

/// `POST /api/v1/crls`: the body is a DER or PEM CRL.
pub async fn crl_add(
    State(state): State<WebState>,
    who: Authed,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    ops::add_crl(&state, &who, &body).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One field connection in `GET /api/v1/fields`: its configuration
/// (passwords as `<stored>`) and, when running, its status.
#[derive(Debug, Serialize)]
pub struct FieldEntry {
    /// The `[[field_servers]]` entry.
    pub config: uagate_config::FieldServer,
    /// The live status, when the connection runs (every stored entry runs
    /// once the change is applied, a moment after it is stored).
    pub status: Option<ops::FieldView>,
}

/// `GET /api/v1/fields`.
pub async fn fields(State(state): State<WebState>) -> Result<Json<Vec<FieldEntry>>, ApiError> {
    let mut config = ops::stored_config(&state).await?;
    ops::redact(&mut config);
    let live = ops::status(&state).fields;
    Ok(Json(
        config
            .field_servers
            .into_iter()
            .map(|f| {
                let status = live.iter().find(|v| v.name == f.name).cloned();
                FieldEntry { config: f, status }
            })
            .collect(),
    ))
}

/// `POST /api/v1/fields`: adds a field connection or replaces the one with
/// the same name (applied at once).
pub async fn field_put(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<uagate_config::FieldServer>, JsonRejection>,
) -> Result<Json<ConfigChange>, ApiError> {
    let Json(field) = body.map_err(json_error)?;
    Ok(Json(ops::upsert_field(&state, &who, field).await?))
}

/// `POST /api/v1/field-test`: "Test connection" of a field connection
/// entry before it is saved (JSON like `POST /api/v1/fields`): what each of
/// its URLs answers, and an untrusted server certificate to trust.
pub async fn field_test_entry(
    State(state): State<WebState>,
    body: Result<Json<uagate_config::FieldServer>, JsonRejection>,
) -> Result<Json<Vec<ops::ProbeView>>, ApiError> {
    let Json(field) = body.map_err(json_error)?;
    let name = field.name.clone();
    Ok(Json(ops::probe_entry(&state, &field, Some(&name)).await?))
}

/// `DELETE /api/v1/fields/{name}`.
pub async fn field_delete(
    State(state): State<WebState>,
    who: Authed,
    Path(name): Path<String>,
) -> Result<Json<ConfigChange>, ApiError> {
    Ok(Json(ops::remove_field(&state, &who, &name).await?))
}

/// `GET /api/v1/fields/{name}/history`: recent events, newest first.
pub async fn field_history(
    State(state): State<WebState>,
    Path(name): Path<String>,
) -> Result<Json<Vec<ops::HistoryView>>, ApiError> {
    Ok(Json(ops::field_history(&state, &name)?))
}

/// `POST /api/v1/fields/{name}/test`: probes every URL.
pub async fn field_test(
    State(state): State<WebState>,
    Path(name): Path<String>,
) -> Result<Json<Vec<ops::ProbeView>>, ApiError> {
    Ok(Json(ops::probe_field(&state, &name).await?))
}

/// `POST /api/v1/fields/{name}/failover`: leave the active server.
pub async fn field_failover(
    State(state): State<WebState>,
    who: Authed,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    ops::force_failover(&state, &who, &name).await?;
    Ok(StatusCode::ACCEPTED)
}

/// `POST /api/v1/fields/{name}/reconnect`: start a new reconnect cycle now.
pub async fn field_reconnect(
    State(state): State<WebState>,
    who: Authed,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    ops::reconnect_field(&state, &who, &name).await?;
    Ok(StatusCode::ACCEPTED)
}

/// `GET /api/v1/sessions`.
pub async fn sessions(State(state): State<WebState>) -> Json<Vec<ops::SessionView>> {
    Json(ops::sessions(&state))
}

/// `DELETE /api/v1/sessions/{id}`: closes a northbound session.
pub async fn session_delete(
    State(state): State<WebState>,
    who: Authed,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    ops::close_session(&state, &who, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/v1/system`: the appliance image, its slots and the update
/// in progress.
pub async fn system(State(state): State<WebState>) -> Json<ops::SystemView> {
    Json(ops::system(&state).await)
}

/// The length a request declares, if any.
pub fn declared_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// `POST /api/v1/system/update`: the body is the RAUC bundle
/// (`application/octet-stream`), stored as it arrives and installed in
/// the background: 202, then `GET /api/v1/system` shows the progress.
/// 413 past 2 GiB; 409 while another update runs, or off the appliance.
pub async fn system_update(
    State(state): State<WebState>,
    who: Authed,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<StatusCode, ApiError> {
    use futures_util::StreamExt;
    let mut upload = ops::begin_update(&state, declared_length(&headers)).await?;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid("body", format!("upload broken off: {e}")))?;
        upload.write(&chunk).await?;
    }
    ops::install_update(&state, &who, upload).await?;
    Ok(StatusCode::ACCEPTED)
}

/// `POST /api/v1/system/reboot`: 202, then the appliance restarts; 409
/// while an update is under way, or off the appliance.
pub async fn system_reboot(
    State(state): State<WebState>,
    who: Authed,
) -> Result<StatusCode, ApiError> {
    ops::reboot(&state, &who).await?;
    Ok(StatusCode::ACCEPTED)
}
