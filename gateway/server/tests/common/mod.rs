//! Shared setup for the engine's integration tests: an in-process gateway
//! on an ephemeral loopback port with a real SQLite store in a temp dir,
//! async-opcua clients and raw-socket helpers. Every wait is bounded.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opcua_client::services::{ActivateSession, CreateSession};
use opcua_client::transport::{ConnectorBuilder, TransportPollResult};
use opcua_client::{AsyncSecureChannel, Client, ClientBuilder, IdentityToken, UARequest};
use opcua_core::comms::tcp_types::{ErrorMessage, HelloMessage};
use opcua_core::sync::RwLock;
use opcua_core::{RequestMessage, ResponseMessage};
use opcua_crypto::{CertificateStore, SecurityPolicy};
use opcua_types::{
    ActivateSessionResponse, ApplicationDescription, ApplicationType, AttributeId,
    CallMethodRequest, CallMethodResult, CallRequest, ContentFilter, CreateMonitoredItemsRequest,
    CreateSessionResponse, CreateSubscriptionRequest, CreateSubscriptionResponse,
    DataChangeNotification, DataValue, DateTime, DecodingOptions, EndpointDescription, EventFilter,
    EventNotificationList, ExtensionObject, LocalizedText, MessageSecurityMode,
    MonitoredItemCreateRequest, MonitoredItemCreateResult, MonitoringMode, MonitoringParameters,
    NodeId, PublishRequest, PublishResponse, QualifiedName, ReadRequest, ReadValueId,
    RequestHeader, SimpleAttributeOperand, SimpleBinaryDecodable, SimpleBinaryEncodable,
    StatusChangeNotification, StatusCode, SubscriptionAcknowledgement, TimestampsToReturn, Variant,
    WriteRequest, WriteValue,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use uagate_server::Gateway;
use uagate_store::Store;

/// Upper bound for any single step of a test.
pub const STEP: Duration = Duration::from_secs(20);

/// Runs `fut` with a timeout so a hung server fails the test instead of hanging it.
pub async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(STEP, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A running gateway with its temp dir and store.
pub struct TestGateway {
    /// The running gateway (taken by [`TestGateway::stop`]).
    pub gw: Option<Gateway>,
    /// The same store the engine uses.
    pub store: Store,
    /// Data dir, SQLite file and client PKI dirs live here.
    pub tmp: tempfile::TempDir,
    /// Advertised endpoint URL.
    pub url: String,
    /// Listening address.
    pub addr: SocketAddr,
    /// The extra TOML the gateway was started with (reused by [`TestGateway::restart`]).
    pub extra: String,
}

impl TestGateway {
    /// Starts a gateway on 127.0.0.1:0; `extra` is appended to the TOML config.
    pub async fn start(extra: &str) -> TestGateway {
        let tmp = tempfile::tempdir().unwrap();
        Self::start_in(tmp, extra).await
    }

    /// Starts a gateway whose data dir and SQLite file live in `tmp`
    /// (reused as they are when they exist).
    pub async fn start_in(tmp: tempfile::TempDir, extra: &str) -> TestGateway {
        let text = format!("[listen]\nopc_tcp = \"127.0.0.1:0\"\n\n{extra}\n");
        let mut config = uagate_config::Config::from_toml(&text).expect("valid test config");
        // Many tests use Gateway/Demo; a test that needs it absent says so.
        if !extra.contains("demo_nodes") {
            config.server.demo_nodes = true;
        }
        let store = bounded("store open", Store::open(&tmp.path().join("uagate.db")))
            .await
            .expect("store opens");
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let gw = bounded(
            "gateway start",
            uagate_server::start(config, store.clone(), &data),
        )
        .await
        .expect("gateway starts");
        assert_ne!(gw.opc_tcp_addr.port(), 0);
        TestGateway {
            url: gw.endpoint_url.clone(),
            addr: gw.opc_tcp_addr,
            gw: Some(gw),
            store,
            tmp,
            extra: extra.to_string(),
        }
    }

    /// Restarts the gateway like a process restart: shuts it down, closes
    /// the store, and starts again on the same data dir and SQLite file.
    pub async fn restart(mut self) -> TestGateway {
        if let Some(gw) = self.gw.take() {
            bounded("gateway shutdown", gw.shutdown()).await;
        }
        bounded("store close", self.store.close()).await;
        let extra = std::mem::take(&mut self.extra);
        Self::start_in(self.tmp, &extra).await
    }

    /// The running engine.
    pub fn engine(&self) -> &std::sync::Arc<uagate_server::Engine> {
        &self.gw.as_ref().unwrap().engine
    }

    /// Adds user `name` (password `pw`) with `role` to the store.
    pub async fn add_user(&self, name: &str, pw: &str, role: uagate_store::Role) {
        self.store.add_user("test", name, pw, role).await.unwrap();
    }

    /// Opens a Basic256Sha256 SignAndEncrypt channel for a fresh client
    /// `client` (its certificate added to the trust list first).
    pub async fn secure_chan(&self, client: &str) -> Chan {
        let c = self.client(client);
        let own = c.certificate_store().read().read_own_cert().unwrap();
        self.store
            .trust_add(
                "test",
                &own.to_der().unwrap(),
                uagate_store::CertKind::Trusted,
            )
            .await
            .unwrap();
        Chan::open(
            &c,
            self.endpoint(
                SecurityPolicy::Basic256Sha256,
                MessageSecurityMode::SignAndEncrypt,
            ),
        )
        .await
        .expect("secure channel opens")
    }

    /// A None channel with an activated session of user `name`.
    pub async fn user_session(&self, client: &str, name: &str, pw: &str) -> (Chan, NodeId) {
        let chan = self
            .chan(client, SecurityPolicy::None, MessageSecurityMode::None)
            .await;
        let token = chan.session(IdentityToken::new_user_name(name, pw)).await;
        (chan, token)
    }

    /// The engine's offered endpoint for `policy` and `mode`.
    pub fn endpoint(
        &self,
        policy: SecurityPolicy,
        mode: MessageSecurityMode,
    ) -> EndpointDescription {
        self.gw
            .as_ref()
            .unwrap()
            .engine
            .endpoints()
            .iter()
            .find(|o| o.policy == policy && o.mode == mode)
            .map(|o| o.description.clone())
            .expect("endpoint offered")
    }

    /// Number of sessions the engine holds.
    pub fn session_count(&self) -> usize {
        self.gw.as_ref().unwrap().engine.session_count()
    }

    /// A client with its own PKI dir `name` under the temp dir.
    pub fn client(&self, name: &str) -> Client {
        client_in(&self.tmp.path().join("clients").join(name), name)
    }

    /// Opens a raw secure channel with a fresh client named `name`.
    pub async fn chan(
        &self,
        name: &str,
        policy: SecurityPolicy,
        mode: MessageSecurityMode,
    ) -> Chan {
        let client = self.client(name);
        Chan::open(&client, self.endpoint(policy, mode))
            .await
            .expect("secure channel opens")
    }

    /// A None channel with an activated anonymous session of a client that
    /// sends messages up to `max_message_size` (the default client stops at
    /// about 320 KB).
    pub async fn anon_session_sending_up_to(
        &self,
        name: &str,
        max_message_size: usize,
    ) -> (Chan, NodeId) {
        let client = client_builder(&self.tmp.path().join("clients").join(name), name)
            .max_message_size(max_message_size)
            .max_chunk_count(0)
            .client()
            .expect("client config");
        let chan = Chan::open(
            &client,
            self.endpoint(SecurityPolicy::None, MessageSecurityMode::None),
        )
        .await
        .expect("secure channel opens");
        let token = chan.session(IdentityToken::Anonymous).await;
        (chan, token)
    }

    /// Opens a None channel with an activated anonymous session.
    pub async fn anon_session(&self, name: &str) -> (Chan, NodeId) {
        let chan = self
            .chan(name, SecurityPolicy::None, MessageSecurityMode::None)
            .await;
        let token = chan.session(IdentityToken::Anonymous).await;
        (chan, token)
    }

    /// Stops the gateway.
    pub async fn stop(mut self) {
        if let Some(gw) = self.gw.take() {
            bounded("gateway shutdown", gw.shutdown()).await;
        }
    }
}

/// An async-opcua client config rooted at `pki` (sample key pair created there).
pub fn client_in(pki: &Path, name: &str) -> Client {
    client_builder(pki, name).client().expect("client config")
}

/// The settings of [`client_in`], for a test that changes some of them.
pub fn client_builder(pki: &Path, name: &str) -> ClientBuilder {
    ClientBuilder::new()
        .application_name(format!("uagate test {name}"))
        .application_uri(format!("urn:uagate:test:{name}"))
        .product_uri("urn:uagate:test")
        .pki_dir(pki)
        .create_sample_keypair(true)
        .trust_server_certs(true)
        .session_retry_limit(1)
        .request_timeout(Duration::from_secs(10))
}

/// A client-side secure channel driven by a background task, for sending
/// hand-made service requests with full control over the session token.
pub struct Chan {
    /// The channel.
    pub channel: Arc<AsyncSecureChannel>,
    /// The endpoint it was opened to.
    pub endpoint: EndpointDescription,
    /// The client's certificate store.
    pub certs: Arc<RwLock<CertificateStore>>,
    /// Client application URI (matches its certificate).
    pub application_uri: String,
    task: JoinHandle<StatusCode>,
    handle: AtomicU32,
}

impl Chan {
    /// Opens a channel to `endpoint` without retries.
    pub async fn open(
        client: &Client,
        endpoint: EndpointDescription,
    ) -> Result<Chan, opcua_types::Error> {
        let application_uri = client_application_uri(client);
        let certs = client.certificate_store().clone();
        let channel = client
            .session_builder()
            .connect_to_endpoint_directly(endpoint.clone())?
            .build_channel(certs.clone())?;
        let connector = endpoint.endpoint_url.as_ref().to_string().build()?;
        let mut event_loop = bounded("open channel", channel.connect_no_retry(&connector)).await?;
        let task = tokio::spawn(async move {
            loop {
                if let TransportPollResult::Closed(s) = event_loop.poll().await {
                    return s;
                }
            }
        });
        Ok(Chan {
            channel: Arc::new(channel),
            endpoint,
            certs,
            application_uri,
            task,
            handle: AtomicU32::new(1000),
        })
    }

    /// A request header with `token` and a fresh handle.
    pub fn header(&self, token: &NodeId) -> RequestHeader {
        RequestHeader::new(
            token,
            &DateTime::now(),
            self.handle.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Sends a request and waits for its response (ServiceFaults included).
    pub async fn send(
        &self,
        req: impl Into<RequestMessage>,
    ) -> Result<ResponseMessage, opcua_types::Error> {
        bounded("request", self.channel.send(req, Duration::from_secs(10))).await
    }

    /// Sends a request that must be answered; returns the service result.
    pub async fn status(&self, req: impl Into<RequestMessage>) -> StatusCode {
        let resp = self.send(req).await.expect("response received");
        resp.response_header().service_result
    }

    /// CreateSession with `timeout_ms` as requested session timeout.
    pub async fn create_session(
        &self,
        timeout_ms: f64,
    ) -> Result<CreateSessionResponse, opcua_types::Error> {
        let req = CreateSession::new_manual(
            &self.certs,
            &self.endpoint,
            1,
            Duration::from_secs(10),
            NodeId::null(),
            self.handle.fetch_add(1, Ordering::Relaxed),
        )
        .client_description(ApplicationDescription {
            application_uri: self.application_uri.as_str().into(),
            product_uri: "urn:uagate:test".into(),
            application_name: LocalizedText::new("en", "uagate test"),
            application_type: ApplicationType::Client,
            ..Default::default()
        })
        .endpoint_url(self.endpoint.endpoint_url.clone())
        .session_name("test session")
        .client_cert_from_store(&self.certs)
        .session_timeout(timeout_ms);
        bounded("create session", req.send(&self.channel)).await
    }

    /// ActivateSession of `token` with `identity`.
    pub async fn activate(
        &self,
        token: &NodeId,
        identity: IdentityToken,
    ) -> Result<ActivateSessionResponse, opcua_types::Error> {
        let key = self.certs.read().read_own_pkey().ok();
        let mut req = ActivateSession::new_manual(
            self.endpoint.clone(),
            1,
            Duration::from_secs(10),
            token.clone(),
            self.handle.fetch_add(1, Ordering::Relaxed),
        )
        .identity_token(identity);
        if let Some(key) = key {
            req = req.private_key(key);
        }
        bounded("activate session", req.send(&self.channel)).await
    }

    /// Creates and activates a session; returns its authentication token.
    pub async fn session(&self, identity: IdentityToken) -> NodeId {
        let created = self.create_session(60_000.0).await.expect("CreateSession");
        self.activate(&created.authentication_token, identity)
            .await
            .expect("ActivateSession");
        created.authentication_token
    }

    /// Reads `nodes` with `token`.
    pub async fn read(
        &self,
        token: &NodeId,
        nodes: Vec<ReadValueId>,
    ) -> Result<ResponseMessage, opcua_types::Error> {
        self.send(ReadRequest {
            request_header: self.header(token),
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Neither,
            nodes_to_read: Some(nodes),
        })
        .await
    }

    /// Service result of reading the server's CurrentTime with `token`.
    pub async fn read_status(&self, token: &NodeId) -> StatusCode {
        self.read(token, vec![ReadValueId::from(current_time())])
            .await
            .expect("read answered")
            .response_header()
            .service_result
    }

    /// Whether the transport task has ended (the connection is gone).
    pub fn is_closed(&self) -> bool {
        self.task.is_finished()
    }

    /// Waits at most `wait` for the server to close the connection;
    /// returns the status the transport ended with, `None` while it stays
    /// open.
    pub async fn closed_by_server(self, wait: Duration) -> Option<StatusCode> {
        tokio::time::timeout(wait, self.task)
            .await
            .ok()
            .map(|r| r.expect("transport task"))
    }

    /// Closes the channel and waits for the transport to end.
    pub async fn close(self) {
        self.channel.close_channel().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

fn client_application_uri(client: &Client) -> String {
    // The sample key pair carries the configured application URI.
    let cert = client
        .certificate_store()
        .read()
        .read_own_cert()
        .expect("client certificate");
    uagate_store::certificate_application_uri(&cert.to_der().unwrap())
        .unwrap()
        .expect("application uri in client cert")
}

/// Server_ServerStatus_CurrentTime.
pub fn current_time() -> NodeId {
    NodeId::new(0, 2258u32)
}

// ------------------------------------------------------------- raw sockets

/// Connects a raw TCP socket to the gateway.
pub async fn raw(addr: SocketAddr) -> TcpStream {
    bounded("tcp connect", TcpStream::connect(addr))
        .await
        .expect("tcp connect")
}

/// A valid encoded Hello for `url`.
pub fn hello_bytes(url: &str) -> Vec<u8> {
    let hello = HelloMessage::new(url, 65536, 65536, 0, 0);
    let mut out = Vec::new();
    hello.encode(&mut out).unwrap();
    out
}

/// A UACP frame with its size (bytes 4..8) filled in.
pub fn with_size(mut frame: Vec<u8>) -> Vec<u8> {
    let n = (frame.len() as u32).to_le_bytes();
    frame[4..8].copy_from_slice(&n);
    frame
}

/// The type id and fields of `request`, as a message body carries them.
pub fn encode_request(request: &RequestMessage) -> Vec<u8> {
    use opcua_core::Message as _;
    use opcua_types::BinaryEncodable as _;
    let ctx = opcua_types::ContextOwned::default();
    let mut body = Vec::new();
    request.type_id().encode(&mut body, &ctx.context()).unwrap();
    request.encode(&mut body, &ctx.context()).unwrap();
    body
}

/// The response in a message body (type id then fields).
pub fn decode_response(mut body: &[u8]) -> ResponseMessage {
    use opcua_core::Message as _;
    use opcua_types::BinaryDecodable as _;
    let ctx = opcua_types::ContextOwned::default();
    let ctx = ctx.context();
    let type_id = NodeId::decode(&mut body, &ctx).unwrap();
    ResponseMessage::decode_by_object_id(&mut body, type_id.as_object_id().unwrap(), &ctx).unwrap()
}

/// An OpenSecureChannel (Issue, SecurityPolicy None) request frame.
pub fn opn_none_frame() -> Vec<u8> {
    const NONE_URI: &str = "http://opcfoundation.org/UA/SecurityPolicy#None";
    let mut opn = b"OPNF\0\0\0\0".to_vec();
    opn.extend_from_slice(&0u32.to_le_bytes());
    opn.extend_from_slice(&(NONE_URI.len() as i32).to_le_bytes());
    opn.extend_from_slice(NONE_URI.as_bytes());
    opn.extend_from_slice(&(-1i32).to_le_bytes());
    opn.extend_from_slice(&(-1i32).to_le_bytes());
    opn.extend_from_slice(&1u32.to_le_bytes());
    opn.extend_from_slice(&1u32.to_le_bytes());
    let request = RequestMessage::from(opcua_types::OpenSecureChannelRequest {
        request_header: RequestHeader::new(&NodeId::null(), &DateTime::now(), 1),
        client_protocol_version: 0,
        request_type: opcua_types::SecurityTokenRequestType::Issue,
        security_mode: MessageSecurityMode::None,
        client_nonce: opcua_types::ByteString::null(),
        requested_lifetime: 60_000,
    });
    opn.extend_from_slice(&encode_request(&request));
    with_size(opn)
}

/// The channel id and token id of an OpenSecureChannel response frame
/// (SecurityPolicy None); panics on anything else.
pub fn parse_opn_none(resp: &[u8]) -> (u32, u32) {
    assert_eq!(&resp[..4], b"OPNF", "OPN response expected");
    let channel = u32::from_le_bytes(resp[8..12].try_into().unwrap());
    let uri_len = i32::from_le_bytes(resp[12..16].try_into().unwrap()).max(0) as usize;
    let mut at = 16 + uri_len;
    for _ in 0..2 {
        let n = i32::from_le_bytes(resp[at..at + 4].try_into().unwrap()).max(0) as usize;
        at += 4 + n;
    }
    at += 8;
    let response = decode_response(&resp[at..]);
    let ResponseMessage::OpenSecureChannel(r) = response else {
        panic!("not an OpenSecureChannelResponse: {response:?}");
    };
    (channel, r.security_token.token_id)
}

/// Reads one whole frame (header + body) within `wait`; `None` when the
/// peer closed before a whole frame arrived.
pub async fn read_frame(stream: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
    tokio::time::timeout(wait, async {
        let mut header = [0u8; 8];
        stream.read_exact(&mut header).await.ok()?;
        let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        assert!((8..=1 << 20).contains(&size), "sane frame size {size}");
        let mut frame = header.to_vec();
        frame.resize(size, 0);
        stream.read_exact(&mut frame[8..]).await.ok()?;
        Some(frame)
    })
    .await
    .expect("frame or close within the wait")
}

/// Reads frames until an ERR frame and returns its status.
pub async fn expect_error(stream: &mut TcpStream, wait: Duration) -> StatusCode {
    loop {
        let frame = read_frame(stream, wait)
            .await
            .expect("an Error message before the close");
        if &frame[..3] == b"ERR" {
            let msg = ErrorMessage::decode(&mut &frame[..], &DecodingOptions::default())
                .expect("Error message decodes");
            return msg.error;
        }
    }
}

/// Asserts the server closes the socket (EOF or reset) within a few seconds.
pub async fn expect_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "server closed the socket");
}

/// Sends `bytes`, ignoring a reset from a server that already closed.
pub async fn send_raw(stream: &mut TcpStream, bytes: &[u8]) {
    let _ = stream.write_all(bytes).await;
}

// ---------------------------------------------------- subscriptions, calls

/// Gateway.Demo.* node in the gateway namespace.
pub fn demo(name: &str) -> NodeId {
    NodeId::new(2, name)
}

/// Data changes of a Publish response as (client handle, value).
pub fn data_changes(r: &PublishResponse) -> Vec<(u32, DataValue)> {
    let mut out = Vec::new();
    for eo in r
        .notification_message
        .notification_data
        .as_deref()
        .unwrap_or(&[])
    {
        if let Some(dc) = eo.inner_as::<DataChangeNotification>() {
            for n in dc.monitored_items.as_deref().unwrap_or(&[]) {
                out.push((n.client_handle, n.value.clone()));
            }
        }
    }
    out
}

/// Events of a Publish response as (client handle, fields).
pub fn events(r: &PublishResponse) -> Vec<(u32, Vec<Variant>)> {
    let mut out = Vec::new();
    for eo in r
        .notification_message
        .notification_data
        .as_deref()
        .unwrap_or(&[])
    {
        if let Some(list) = eo.inner_as::<EventNotificationList>() {
            for e in list.events.as_deref().unwrap_or(&[]) {
                out.push((e.client_handle, e.event_fields.clone().unwrap_or_default()));
            }
        }
    }
    out
}

/// The StatusChangeNotification of a Publish response, if any.
pub fn status_change(r: &PublishResponse) -> Option<StatusCode> {
    r.notification_message
        .notification_data
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .find_map(|eo| eo.inner_as::<StatusChangeNotification>().map(|s| s.status))
}

/// Whether a Publish response is a keep-alive (no notifications).
pub fn is_keep_alive(r: &PublishResponse) -> bool {
    r.notification_message
        .notification_data
        .as_deref()
        .unwrap_or(&[])
        .is_empty()
}

/// A data monitored item on the Value of `node`.
pub fn value_item(
    node: NodeId,
    client_handle: u32,
    sampling_ms: f64,
) -> MonitoredItemCreateRequest {
    MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId::from(node),
        monitoring_mode: MonitoringMode::Reporting,
        requested_parameters: MonitoringParameters {
            client_handle,
            sampling_interval: sampling_ms,
            filter: ExtensionObject::null(),
            queue_size: 10,
            discard_oldest: true,
        },
    }
}

/// A select clause `type`/`name` of an EventFilter.
pub fn select(type_id: u32, name: &str) -> SimpleAttributeOperand {
    SimpleAttributeOperand {
        type_definition_id: NodeId::new(0, type_id),
        browse_path: Some(vec![QualifiedName::new(0, name)]),
        attribute_id: AttributeId::Value as u32,
        index_range: Default::default(),
    }
}

/// An event monitored item on the Server object with `clauses`.
pub fn server_event_item(
    client_handle: u32,
    clauses: Vec<SimpleAttributeOperand>,
) -> MonitoredItemCreateRequest {
    MonitoredItemCreateRequest {
        item_to_monitor: ReadValueId {
            node_id: NodeId::new(0, 2253u32),
            attribute_id: AttributeId::EventNotifier as u32,
            index_range: Default::default(),
            data_encoding: Default::default(),
        },
        monitoring_mode: MonitoringMode::Reporting,
        requested_parameters: MonitoringParameters {
            client_handle,
            sampling_interval: 0.0,
            filter: ExtensionObject::from_message(EventFilter {
                select_clauses: Some(clauses),
                where_clause: ContentFilter::default(),
            }),
            queue_size: 10,
            discard_oldest: true,
        },
    }
}

impl Chan {
    /// CreateSubscription; panics unless it is answered with a response.
    pub async fn create_subscription(
        &self,
        token: &NodeId,
        interval_ms: f64,
        lifetime: u32,
        keep_alive: u32,
    ) -> CreateSubscriptionResponse {
        let resp = self
            .send(CreateSubscriptionRequest {
                request_header: self.header(token),
                requested_publishing_interval: interval_ms,
                requested_lifetime_count: lifetime,
                requested_max_keep_alive_count: keep_alive,
                max_notifications_per_publish: 0,
                publishing_enabled: true,
                priority: 0,
            })
            .await
            .unwrap();
        match resp {
            ResponseMessage::CreateSubscription(r) => *r,
            other => panic!(
                "CreateSubscription failed: {:?}",
                other.response_header().service_result
            ),
        }
    }

    /// CreateMonitoredItems; returns the per-item results.
    pub async fn monitor(
        &self,
        token: &NodeId,
        subscription_id: u32,
        items: Vec<MonitoredItemCreateRequest>,
    ) -> Vec<MonitoredItemCreateResult> {
        let resp = self
            .send(CreateMonitoredItemsRequest {
                request_header: self.header(token),
                subscription_id,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: Some(items),
            })
            .await
            .unwrap();
        match resp {
            ResponseMessage::CreateMonitoredItems(r) => r.results.unwrap_or_default(),
            other => panic!(
                "CreateMonitoredItems failed: {:?}",
                other.response_header().service_result
            ),
        }
    }

    /// A Publish request acknowledging `acks` (subscription, sequence number).
    pub fn publish_request(&self, token: &NodeId, acks: &[(u32, u32)]) -> PublishRequest {
        PublishRequest {
            request_header: self.header(token),
            subscription_acknowledgements: Some(
                acks.iter()
                    .map(|(s, n)| SubscriptionAcknowledgement {
                        subscription_id: *s,
                        sequence_number: *n,
                    })
                    .collect(),
            ),
        }
    }

    /// Sends a Publish; Ok(response) or Err(service fault status).
    pub async fn publish(
        &self,
        token: &NodeId,
        acks: &[(u32, u32)],
    ) -> Result<PublishResponse, StatusCode> {
        match self.send(self.publish_request(token, acks)).await.unwrap() {
            ResponseMessage::Publish(r) => Ok(*r),
            other => Err(other.response_header().service_result),
        }
    }

    /// Publishes (acknowledging every data message) until `f` returns
    /// `Some`, for at most `limit`; panics on a fault or when time is up.
    pub async fn publish_until<T>(
        &self,
        token: &NodeId,
        limit: Duration,
        mut f: impl FnMut(&PublishResponse) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + limit;
        let mut acks: Vec<(u32, u32)> = Vec::new();
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition not met within {limit:?}"
            );
            let r = self.publish(token, &acks).await.expect("Publish answered");
            acks.clear();
            if !is_keep_alive(&r) {
                acks.push((r.subscription_id, r.notification_message.sequence_number));
            }
            if let Some(t) = f(&r) {
                return t;
            }
        }
    }

    /// Calls one method; returns its result.
    pub async fn call(
        &self,
        token: &NodeId,
        object: NodeId,
        method: NodeId,
        args: Vec<Variant>,
    ) -> CallMethodResult {
        let resp = self
            .send(CallRequest {
                request_header: self.header(token),
                methods_to_call: Some(vec![CallMethodRequest {
                    object_id: object,
                    method_id: method,
                    input_arguments: Some(args),
                }]),
            })
            .await
            .unwrap();
        match resp {
            ResponseMessage::Call(r) => {
                let mut results = r.results.unwrap_or_default();
                assert_eq!(results.len(), 1);
                results.remove(0)
            }
            other => panic!("Call failed: {:?}", other.response_header().service_result),
        }
    }

    /// Writes the Value of `node`; returns the operation status.
    pub async fn write_value(&self, token: &NodeId, node: NodeId, value: Variant) -> StatusCode {
        let resp = self
            .send(WriteRequest {
                request_header: self.header(token),
                nodes_to_write: Some(vec![WriteValue {
                    node_id: node,
                    attribute_id: AttributeId::Value as u32,
                    index_range: Default::default(),
                    value: DataValue::value_only(value),
                }]),
            })
            .await
            .unwrap();
        match resp {
            ResponseMessage::Write(r) => r.results.unwrap_or_default()[0],
            other => other.response_header().service_result,
        }
    }

    /// Reads the Value of `node`.
    pub async fn read_value(&self, token: &NodeId, node: NodeId) -> DataValue {
        match self
            .read(token, vec![ReadValueId::from(node)])
            .await
            .unwrap()
        {
            ResponseMessage::Read(r) => r.results.unwrap_or_default().remove(0),
            other => panic!("Read failed: {:?}", other.response_header().service_result),
        }
    }
}
