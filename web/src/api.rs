//! REST handlers under `/api/v1`: JSON in, [`crate::ops`] does the work,
//! JSON out. The fixed points scripts rely on (login, status, plan,
//! config, maintenance) keep their JSON shapes.

use std::net::SocketAddr;

use axum::extract::rejection::JsonRejection;
use axum::extract::{ConnectInfo, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use uagate_config::Config;

use crate::auth::Authed;
use crate::error::ApiError;
use crate::ops::{self, ConfigChange, LevelOverride, MaintenanceRequest, StageView, StatusView};
use crate::state::WebState;

/// `POST /api/v1/login` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct LoginRequest {
    /// The user name.
    pub username: String,
    /// The password (never logged).
    pub password: String,
}

/// `POST /api/v1/login` answer.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LoginResponse {
    /// A token for `Authorization: Bearer`.
    pub token: String,
}

/// Answers a login with a token (see [`ops::check_login`]).
pub async fn login(
    State(state): State<WebState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Result<Json<LoginRequest>, JsonRejection>,
) -> Result<Json<LoginResponse>, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    let addr = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let token = ops::check_login(&state, &req.username, &req.password, addr).await?;
    Ok(Json(LoginResponse { token }))
}

/// `POST /api/v1/setup`: see [`ops::check_setup`].
pub async fn setup(
    State(state): State<WebState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Result<Json<ops::SetupRequest>, JsonRejection>,
) -> Result<Json<LoginResponse>, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    let addr = peer.map(|Extension(ConnectInfo(a))| a.ip());
    let token = ops::check_setup(&state, &req, addr).await?;
    Ok(Json(LoginResponse { token }))
}

/// `POST /api/v1/logout`: ends the caller's session; its tokens are
/// refused from now on.
pub async fn logout(State(state): State<WebState>, who: Authed) -> axum::http::StatusCode {
    state.keys.revoke(&who);
    axum::http::StatusCode::NO_CONTENT
}

/// The running gateway at a glance.
pub async fn status(State(state): State<WebState>) -> Json<StatusView> {
    Json(ops::status(&state))
}

/// This appliance's place in the pair (`GET /api/v1/pair`).
pub async fn pair(State(state): State<WebState>) -> Json<ops::PairStatusView> {
    Json(ops::pair(&state))
}

/// The isolation plan of the configuration in force.
pub async fn plan(State(state): State<WebState>) -> Result<Json<Vec<StageView>>, ApiError> {
    let plan = uagate_isolation::plan::Plan::build(&state.engine.applied_config())
        .map_err(ops::plan_error)?;
    Ok(Json(ops::plan_view(&plan)))
}

/// The stored configuration document as JSON. Field-server
/// passwords read as `<stored>`, and sending that back keeps them.
pub async fn get_config(
    State(state): State<WebState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let mut config = ops::stored_config(&state).await?;
    ops::redact(&mut config);
    serde_json::to_value(&config)
        .map(Json)
        .map_err(ApiError::internal)
}

/// A configuration document from its JSON form; a document that does not
/// fit is refused with 422 naming the setting that does not
/// (`server.max_sesion_count` for a misspelt key, `server.max_session_count`
/// for a value of the wrong type), or `config` when the whole document is
/// not an object.
fn config_document(value: serde_json::Value) -> Result<Config, ApiError> {
    serde_path_to_error::deserialize::<_, Config>(value).map_err(|e| {
        let setting = e.path().to_string();
        let setting = if setting == "." || setting.is_empty() {
            "config".to_string()
        } else {
            setting
        };
        ApiError::invalid(
            setting,
            format!("configuration is not valid: {}", e.inner()),
        )
    })
}

/// Replaces the whole configuration document, validated as a unit: an
/// invalid document is refused with 422 naming the setting and nothing is
/// stored.
pub async fn put_config(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<Json<ConfigChange>, ApiError> {
    let Json(value) = body.map_err(json_error)?;
    let new = config_document(value)?;
    Ok(Json(ops::apply_config(&state, &who, new).await?))
}

/// `POST /api/v1/plan/preview`: the plan a configuration document would
/// have, without storing anything; 422 naming the setting when it is
/// invalid.
pub async fn preview_plan(
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<Json<Vec<StageView>>, ApiError> {
    let Json(value) = body.map_err(json_error)?;
    let config = config_document(value)?;
    let plan = ops::check_config(&config)?;
    Ok(Json(ops::plan_view(&plan)))
}

/// Changes the server state like Server.RequestServerStateChange, through
/// the same code path (persisted, audited, evented).
pub async fn maintenance(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<MaintenanceRequest>, JsonRejection>,
) -> Result<Json<StatusView>, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    ops::change_state(&state, &who, &req).await?;
    Ok(Json(ops::status(&state)))
}

/// Sets or clears the operator's ServiceLevel override.
pub async fn service_level(
    State(state): State<WebState>,
    who: Authed,
    body: Result<Json<LevelOverride>, JsonRejection>,
) -> Result<Json<StatusView>, ApiError> {
    let Json(req) = body.map_err(json_error)?;
    ops::override_level(&state, &who, req).await?;
    Ok(Json(ops::status(&state)))
}

/// Unknown paths: a JSON 404 with a stable code.
pub async fn not_found() -> (axum::http::StatusCode, Json<serde_json::Value>) {
    (
        axum::http::StatusCode::NOT_FOUND,
        Json(serde_json::json!({"code": "not_found", "message": "no such resource"})),
    )
}

/// A JSON body refused by the extractor: 413 when it is larger than the
/// route takes (see [`crate::routes::MAX_BODY`]), else 422 naming the
/// problem.
pub(crate) fn json_error(e: JsonRejection) -> ApiError {
    if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::TooLarge(format!(
            "the request body is larger than this call takes ({} KiB)",
            crate::routes::MAX_BODY / 1024
        ));
    }
    ApiError::Invalid {
        field: None,
        message: format!(
            "the request body is not valid JSON for this call: {}",
            e.body_text()
        ),
    }
}
