//! `GET /api/v1/openapi.json`: the OpenAPI 3.1 description of the REST
//! API, built from the operation list below and the JSON Schemas of the
//! request and answer types (derived with `schemars`), so it cannot drift
//! from the types the handlers use. Each operation's least role
//! (`x-uagate-role`) comes from the route table of [`crate::routes`], the
//! one place roles are declared; a test there checks that every route of
//! [`crate::app`] under `/api/v1` is described, and nothing else.

use schemars::{schema_for, JsonSchema};
use serde_json::{json, Map, Value};

use crate::api::{LoginRequest, LoginResponse};
use crate::ops::{
    ConfigChange, HistoryView, LevelOverride, MaintenanceRequest, ProbeView, SessionView,
    SetupRequest, StageView, StatusView, SystemView,
};
use crate::rest::{CertView, Certificates, CrlView, OwnerRequest};
use crate::users::{AuditEntry, NewUser, UserChange, UserView};

/// One operation: method, path, summary, request body schema, answer
/// schema.
struct Op {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    request: Option<Value>,
    response: Option<Value>,
}

fn schema<T: JsonSchema>() -> Option<Value> {
    serde_json::to_value(schema_for!(T)).ok()
}

fn list<T: JsonSchema>() -> Option<Value> {
    serde_json::to_value(schema_for!(Vec<T>)).ok()
}

/// A configuration-document part: described in docs/config.md.
fn doc_part(what: &str) -> Option<Value> {
    Some(
        json!({"type": "object", "description": format!("{what} as in the configuration document (docs/config.md), in JSON")}),
    )
}

fn text() -> Option<Value> {
    Some(json!({"type": "string", "description": "DER or PEM"}))
}

/// Every REST operation, in the order of docs/console.md.
fn operations() -> Vec<Op> {
    let op = |method, path, summary, request, response| Op {
        method,
        path,
        summary,
        request,
        response,
    };
    vec![
        op(
            "post",
            "/api/v1/login",
            "Log in: a token for Authorization: Bearer",
            schema::<LoginRequest>(),
            schema::<LoginResponse>(),
        ),
        op(
            "post",
            "/api/v1/setup",
            "Create the first admin with the one-time setup code",
            schema::<SetupRequest>(),
            schema::<LoginResponse>(),
        ),
        op(
            "post",
            "/api/v1/logout",
            "End this session; its tokens are refused from now on",
            None,
            None,
        ),
        op(
            "get",
            "/api/v1/status",
            "Role, state, ServiceLevel, sessions, field connections",
            None,
            schema::<StatusView>(),
        ),
        op(
            "get",
            "/api/v1/pair",
            "This appliance's place in the pair: role, leader, epoch, applied index, members, integrity",
            None,
            schema::<crate::ops::PairStatusView>(),
        ),
        op(
            "get",
            "/api/v1/plan",
            "The isolation plan in force (the `uagate plan` table)",
            None,
            list::<StageView>(),
        ),
        op(
            "post",
            "/api/v1/plan/preview",
            "The plan a configuration document would have; nothing is stored",
            doc_part("The whole document"),
            list::<StageView>(),
        ),
        op(
            "get",
            "/api/v1/config",
            "The configuration document (passwords read as <stored>)",
            None,
            doc_part("The whole document"),
        ),
        op(
            "put",
            "/api/v1/config",
            "Replace the configuration document, validated as a unit",
            doc_part("The whole document"),
            schema::<ConfigChange>(),
        ),
        op(
            "post",
            "/api/v1/maintenance",
            "RequestServerStateChange: state, return time, reason, drain",
            schema::<MaintenanceRequest>(),
            schema::<StatusView>(),
        ),
        op(
            "put",
            "/api/v1/service-level",
            "Set or clear the ServiceLevel override (with expiry and reason)",
            schema::<LevelOverride>(),
            schema::<StatusView>(),
        ),
        op(
            "get",
            "/api/v1/owners",
            "Trusted owners",
            None,
            doc_part("A list of [[isolation.trusted_owners]]"),
        ),
        op(
            "post",
            "/api/v1/owners",
            "Add or replace a trusted owner, with ingress CIDRs mapped to it",
            schema::<OwnerRequest>(),
            schema::<ConfigChange>(),
        ),
        op(
            "delete",
            "/api/v1/owners/{key}",
            "Remove a trusted owner",
            None,
            schema::<ConfigChange>(),
        ),
        op(
            "get",
            "/api/v1/ingress",
            "Ingress rules, in document order",
            None,
            doc_part("A list of [[isolation.ingress]]"),
        ),
        op(
            "post",
            "/api/v1/ingress",
            "Append an ingress rule",
            doc_part("One [[isolation.ingress]] entry"),
            schema::<ConfigChange>(),
        ),
        op(
            "delete",
            "/api/v1/ingress/{index}",
            "Remove the ingress rule at index (0-based)",
            None,
            schema::<ConfigChange>(),
        ),
        op(
            "get",
            "/api/v1/fields",
            "Field connections: configuration and live status",
            None,
            Some(json!({"type": "array"})),
        ),
        op(
            "post",
            "/api/v1/fields",
            "Add or replace a field connection (applied at once)",
            doc_part("One [[field_servers]] entry"),
            schema::<ConfigChange>(),
        ),
        op(
            "post",
            "/api/v1/field-test",
            "Probe every URL of a field connection entry before saving it",
            doc_part("One [[field_servers]] entry"),
            list::<ProbeView>(),
        ),
        op(
            "delete",
            "/api/v1/fields/{name}",
            "Remove a field connection (unmounted at once)",
            None,
            schema::<ConfigChange>(),
        ),
        op(
            "get",
            "/api/v1/fields/{name}/history",
            "Recent events of a field connection, newest first",
            None,
            list::<HistoryView>(),
        ),
        op(
            "post",
            "/api/v1/fields/{name}/test",
            "Probe every URL of a field connection",
            None,
            list::<ProbeView>(),
        ),
        op(
            "post",
            "/api/v1/fields/{name}/failover",
            "Leave the active field server for the best other one",
            None,
            None,
        ),
        op(
            "post",
            "/api/v1/fields/{name}/reconnect",
            "Start a new reconnect cycle now for every server that waits or gave up",
            None,
            None,
        ),
        op(
            "get",
            "/api/v1/certificates",
            "Own certificates; trusted, issuer and rejected lists",
            None,
            schema::<Certificates>(),
        ),
        op(
            "post",
            "/api/v1/certificates",
            "Add a certificate (?kind=trusted|issuer); body DER or PEM",
            text(),
            schema::<CertView>(),
        ),
        op(
            "delete",
            "/api/v1/certificates/{thumbprint}",
            "Remove a certificate from its list",
            None,
            None,
        ),
        op(
            "post",
            "/api/v1/certificates/{thumbprint}/trust",
            "Trust a rejected certificate",
            None,
            schema::<CertView>(),
        ),
        op(
            "get",
            "/api/v1/crls",
            "Stored CRLs: issuer, times, revoked count and state",
            None,
            list::<CrlView>(),
        ),
        op(
            "post",
            "/api/v1/crls",
            "Add a CRL; body DER or PEM",
            text(),
            None,
        ),
        op(
            "get",
            "/api/v1/sessions",
            "Northbound sessions",
            None,
            list::<SessionView>(),
        ),
        op(
            "delete",
            "/api/v1/sessions/{id}",
            "Close a northbound session",
            None,
            None,
        ),
        op(
            "get",
            "/api/v1/users",
            "Users and roles",
            None,
            list::<UserView>(),
        ),
        op(
            "post",
            "/api/v1/users",
            "Add a user",
            schema::<NewUser>(),
            None,
        ),
        op(
            "put",
            "/api/v1/users/{name}",
            "Change a user's role or password",
            schema::<UserChange>(),
            None,
        ),
        op(
            "delete",
            "/api/v1/users/{name}",
            "Remove a user",
            None,
            None,
        ),
        op(
            "get",
            "/api/v1/audit",
            "The audit trail (?after&limit&actor&kind)",
            None,
            list::<AuditEntry>(),
        ),
        op(
            "get",
            "/api/v1/system",
            "The appliance image: versions, slots A and B, the update in progress",
            None,
            schema::<SystemView>(),
        ),
        op(
            "post",
            "/api/v1/system/update",
            "Install a RAUC update bundle (the body, at most 2 GiB) into the other slot, in the background (202; 409 while one runs or off the appliance; 413 too large)",
            Some(json!({"type": "string", "format": "binary", "description": "The RAUC bundle (.raucb)"})),
            None,
        ),
        op(
            "post",
            "/api/v1/system/reboot",
            "Restart the appliance (202; 409 while an update runs or off the appliance)",
            None,
            None,
        ),
        op(
            "get",
            "/api/v1/openapi.json",
            "This document",
            None,
            Some(json!({"type": "object"})),
        ),
    ]
}

/// The (method, path) pairs described, for the completeness test.
pub fn described() -> Vec<(&'static str, &'static str)> {
    operations().iter().map(|o| (o.method, o.path)).collect()
}

/// Builds the document; `role(method, path)` is the least role of an
/// operation as the router enforces it (`none`: no token).
pub fn build(role: impl Fn(&str, &str) -> Option<&'static str>) -> Value {
    let error = json!({
        "description": "Error: a stable code, a message, and the offending field when there is one",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    });
    let mut paths = Map::new();
    for o in operations() {
        // Every operation is routed (a test in crate::routes checks it).
        let role = role(o.method, o.path).unwrap_or("unrouted");
        let mut operation = Map::new();
        operation.insert("summary".into(), json!(o.summary));
        operation.insert("x-uagate-role".into(), json!(role));
        if role == "none" {
            operation.insert("security".into(), json!([]));
        }
        let params: Vec<Value> = o
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        if !params.is_empty() {
            operation.insert("parameters".into(), Value::Array(params));
        }
        if let Some(req) = o.request {
            let content_type = if o.path.contains("certificates")
                || o.path.contains("crls")
                || o.path == "/api/v1/system/update"
            {
                "application/octet-stream"
            } else {
                "application/json"
            };
            operation.insert(
                "requestBody".into(),
                json!({"required": true, "content": {content_type: {"schema": req}}}),
            );
        }
        let ok = match o.response {
            Some(schema) => {
                json!({"description": "OK", "content": {"application/json": {"schema": schema}}})
            }
            None => json!({"description": "Done (no body, or an empty one)"}),
        };
        operation.insert(
            "responses".into(),
            json!({"200": ok, "401": error, "403": error, "404": error, "409": error, "413": error, "422": error, "429": error}),
        );
        let entry = paths
            .entry(o.path.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(o.method.to_string(), Value::Object(operation));
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "uagate REST API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The operations of the uagate console over JSON. Authenticate with POST /api/v1/login and send the token as Authorization: Bearer. Roles: viewer < operator < admin (x-uagate-role names the least one)."
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
            "schemas": {"Error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "enum": ["unauthenticated", "bad_credentials", "forbidden", "csrf", "not_found", "conflict", "too_large", "invalid", "throttled", "internal"]},
                    "message": {"type": "string"},
                    "field": {"type": "string"}
                }
            }}
        },
        "paths": paths,
    })
}
