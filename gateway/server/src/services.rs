//! Service dispatch: one decoded request in, one response out. Called by
//! the connection driver for every [`uagate_proto::Event::Request`].

use std::time::{Duration, Instant};

use opcua_core::{RequestMessage, ResponseMessage};
use opcua_crypto::{
    legacy_decrypt_secret, random, verify_x509_identity_token, SecurityPolicy, X509,
};
use opcua_types::{
    ActivateSessionRequest, ActivateSessionResponse, AnonymousIdentityToken, ByteString,
    CancelRequest, CancelResponse, CloseSessionRequest, CloseSessionResponse, CreateSessionRequest,
    CreateSessionResponse, MessageSecurityMode, NodeId, RegisterNodesRequest,
    RegisterNodesResponse, RequestHeader, ResponseHeader, ServiceFault, SignatureData, StatusCode,
    UnregisterNodesRequest, UnregisterNodesResponse, UserNameIdentityToken, X509IdentityToken,
};
use uagate_config::UserToken;

use crate::endpoints::policy_id;
use crate::error::ServiceError;
use crate::routed::check_count;
use crate::session::{Active, Created, Phase, Session, UserIdentity};
use crate::sessions::subscription_limits;
use crate::standing::Credential;
use crate::{ChannelInfo, Engine};

/// Nonce length required of clients on secured channels (Part 4).
const MIN_NONCE_LEN: usize = 32;

type Result<T> = std::result::Result<T, ServiceError>;

/// A BadServerTooBusy fault always carries the RetryAfterMs hint
/// (`retry_after`), whichever stage refused the request.
fn fault(header: &RequestHeader, err: &ServiceError, retry_after: Duration) -> ResponseMessage {
    match err.status() {
        StatusCode::BadServerTooBusy => {
            crate::dispatch::too_busy(header.request_handle, retry_after)
        }
        status => ServiceFault::new(header, status).into(),
    }
}

impl Engine {
    /// Handles one request of channel `chan`. Returns the response, or
    /// `None` when it is sent later (a queued Publish, which is then not
    /// timed). Counts the answer by service and status, with its latency.
    pub async fn handle_request(
        &self,
        chan: &ChannelInfo,
        request_id: u32,
        request: RequestMessage,
    ) -> Option<ResponseMessage> {
        let service = crate::stats::service_index(&request);
        let slot = crate::session_diag::slot(service, &request);
        let started = Instant::now();
        let answer = self.answer_request(chan, request_id, request, slot).await;
        if let Some(a) = &answer {
            self.pipeline.stats().observe(
                service,
                a.response_header().service_result,
                started.elapsed(),
            );
        }
        answer
    }

    /// The work of [`Engine::handle_request`]; counts the answer in the
    /// diagnostics of the session the request names, in `slot` (see
    /// [`crate::session_diag::slot`]).
    async fn answer_request(
        &self,
        chan: &ChannelInfo,
        request_id: u32,
        request: RequestMessage,
        slot: usize,
    ) -> Option<ResponseMessage> {
        let header = request.request_header().clone();
        // CreateSession and ActivateSession hold a SessionEstablishment slot
        // while they run (resource isolation); none free -> BadServerTooBusy.
        let _establishing = match (&request, &chan.caller) {
            (
                RequestMessage::CreateSession(_) | RequestMessage::ActivateSession(_),
                Some(caller),
            ) => match self.pipeline.admission().session_establishment(caller) {
                Ok(lease) => Some(lease),
                Err(rejection) => {
                    tracing::debug!(%rejection, "session establishment refused");
                    return Some(fault(
                        &header,
                        &ServiceError::Status(StatusCode::BadServerTooBusy),
                        self.pipeline.retry_after(),
                    ));
                }
            },
            _ => None,
        };
        let result = match request {
            RequestMessage::Publish(r) => match self.publish(chan, request_id, &r) {
                Ok(answer) => {
                    let status = answer
                        .as_ref()
                        .map_or(StatusCode::Good, |a| a.response_header().service_result);
                    self.sessions
                        .count_request(&header.authentication_token, slot, status);
                    return answer;
                }
                Err(e) => Err(e),
            },
            RequestMessage::GetEndpoints(r) => Ok(self.endpoints.get_endpoints(&r)),
            RequestMessage::FindServers(r) => Ok(self.endpoints.find_servers(&r)),
            RequestMessage::CreateSession(r) => self.create_session(chan, &r),
            RequestMessage::ActivateSession(r) => Box::pin(self.activate_session(chan, &r)).await,
            RequestMessage::CloseSession(r) => self.close_session(chan, &r),
            RequestMessage::Cancel(r) => self.cancel(chan, &r),
            // Services over the aggregated address space are boxed: their
            // futures are large, and this one is moved into a task for every
            // request.
            RequestMessage::Browse(r) => Box::pin(self.browse(chan, &r)).await,
            RequestMessage::BrowseNext(r) => Box::pin(self.browse_next(chan, &r)).await,
            RequestMessage::TranslateBrowsePathsToNodeIds(r) => {
                Box::pin(self.translate(chan, &r)).await
            }
            RequestMessage::RegisterNodes(r) => self.register_nodes(chan, &r),
            RequestMessage::UnregisterNodes(r) => self.unregister_nodes(chan, &r),
            RequestMessage::Read(r) if self.space.fields().is_none() => {
                self.read_unmounted(chan, &r)
            }
            RequestMessage::Read(r) => Box::pin(self.read(chan, &r)).await,
            RequestMessage::Write(r) => Box::pin(self.write(chan, &r)).await,
            RequestMessage::HistoryRead(r) => Box::pin(self.history_read(chan, &r)).await,
            RequestMessage::Call(r) => Box::pin(self.call(chan, &r)).await,
            RequestMessage::CreateSubscription(r) => self.create_subscription(chan, &r),
            RequestMessage::ModifySubscription(r) => self.modify_subscription(chan, &r),
            RequestMessage::SetPublishingMode(r) => self.set_publishing_mode(chan, &r),
            RequestMessage::DeleteSubscriptions(r) => self.delete_subscriptions(chan, &r),
            RequestMessage::Republish(r) => self.republish(chan, &r),
            RequestMessage::TransferSubscriptions(r) => {
                self.sessions.transfer_subscriptions(chan, &r)
            }
            RequestMessage::CreateMonitoredItems(r) => {
                Box::pin(self.space.prefetch_field_eu_ranges(&r)).await;
                self.create_monitored_items(chan, &r)
            }
            RequestMessage::ModifyMonitoredItems(r) => self.modify_monitored_items(chan, &r),
            RequestMessage::DeleteMonitoredItems(r) => self.delete_monitored_items(chan, &r),
            RequestMessage::SetMonitoringMode(r) => self.set_monitoring_mode(chan, &r),
            RequestMessage::SetTriggering(r) => self.set_triggering(chan, &r),
            _ => Err(ServiceError::Unsupported),
        };
        let answer = result.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "service fault");
            fault(&header, &e, self.pipeline.retry_after())
        });
        self.sessions.count_request(
            &header.authentication_token,
            slot,
            answer.response_header().service_result,
        );
        Some(answer)
    }

    fn create_session(
        &self,
        chan: &ChannelInfo,
        r: &CreateSessionRequest,
    ) -> Result<ResponseMessage> {
        let secure = chan.policy != SecurityPolicy::None;
        if secure {
            if r.client_nonce.as_ref().len() < MIN_NONCE_LEN {
                return Err(ServiceError::NonceInvalid);
            }
            // Over UA-TCP the session certificate must be the channel's
            // (the same leaf; either may carry the issuer chain).
            if !crate::open::same_leaf(
                r.client_certificate.as_ref(),
                chan.client_certificate.as_ref(),
            ) {
                return Err(ServiceError::CertificateInvalid);
            }
            let uri = uagate_store::certificate_application_uri(chan.client_certificate.as_ref())
                .map_err(|_| ServiceError::CertificateInvalid)?;
            if uri.as_deref() != Some(r.client_description.application_uri.as_ref()) {
                return Err(ServiceError::CertificateUriInvalid);
            }
        }
        let limits = &self.config.server;
        if self
            .control
            .refuses_sessions(limits.refuse_sessions_in_maintenance)
        {
            return Err(ServiceError::Status(StatusCode::BadServerHalted));
        }
        // A client's double: NaN, negative, infinite or beyond what a
        // Duration holds is revised to the nearest limit, never a panic.
        let requested = Duration::try_from_secs_f64(r.requested_session_timeout / 1000.0)
            .unwrap_or(if r.requested_session_timeout > 0.0 {
                limits.max_session_timeout
            } else {
                limits.min_session_timeout
            });
        let timeout = requested.clamp(limits.min_session_timeout, limits.max_session_timeout);
        let server_nonce = random::byte_string(MIN_NONCE_LEN);
        let server_signature = if secure {
            opcua_crypto::create_signature_data(
                &self.endpoints.identity().key,
                chan.policy,
                &r.client_certificate,
                &r.client_nonce,
            )
            .map_err(|e| ServiceError::Internal(e.to_string()))?
        } else {
            SignatureData::default()
        };
        let session = Session {
            id: NodeId::new(1, random::byte_string(16)),
            auth_token: NodeId::new(0, random::byte_string(32)),
            name: r.session_name.to_string(),
            channel_id: chan.channel_id,
            // Null on None: there the CreateSession certificate proves nothing,
            // and a transfer compares it with the new channel's (null) one.
            client_certificate: chan.client_certificate.clone(),
            timeout,
            last_activity: Instant::now(),
            server_nonce: server_nonce.clone(),
            phase: Phase::Created(Created {
                since: Instant::now(),
            }),
            continuation_points: uagate_space::ContinuationPoints::new(
                limits.max_browse_continuation_points,
            ),
            subscriptions: uagate_subs::SessionSubscriptions::new(subscription_limits(
                &self.config.server,
            )),
            origin: crate::session::Origin {
                transport: chan.transport,
                security_policy: chan.policy.to_uri().to_string(),
                security_mode: match chan.mode {
                    MessageSecurityMode::Sign => "Sign",
                    MessageSecurityMode::SignAndEncrypt => "SignAndEncrypt",
                    _ => "None",
                },
                owner: chan.caller.as_ref().map(|c| c.owner.to_string()),
                created: Some(std::time::SystemTime::now()),
            },
            client: Box::new(crate::session_diag::ClientRecord::new(
                crate::session_diag::ClientFixed {
                    description: r.client_description.clone(),
                    session_name: r.session_name.clone(),
                    server_uri: r.server_uri.clone(),
                    endpoint_url: r.endpoint_url.clone(),
                    max_response_message_size: r.max_response_message_size,
                    connected: opcua_types::DateTime::now(),
                    security_policy_uri: chan.policy.to_uri().into(),
                    certificate: chan.client_certificate.clone(),
                },
            )),
        };
        let (id, token) = (session.id.clone(), session.auth_token.clone());
        let count = self.sessions.insert(session)?;
        self.space.publish_session_count(count);
        tracing::info!(channel = chan.channel_id, session = %id, "session created");
        Ok(CreateSessionResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            session_id: id,
            authentication_token: token,
            revised_session_timeout: timeout.as_secs_f64() * 1000.0,
            server_nonce,
            server_certificate: self.endpoints.identity().cert.as_byte_string(),
            server_endpoints: Some(self.endpoints.discovery().to_vec()),
            server_software_certificates: None,
            server_signature,
            max_request_message_size: limits.max_message_size,
        }
        .into())
    }

    async fn activate_session(
        &self,
        chan: &ChannelInfo,
        r: &ActivateSessionRequest,
    ) -> Result<ResponseMessage> {
        // Phase 1 (under the lock): find the session, check channel binding and signature.
        let (server_nonce, previous_identity) = {
            let mut sessions = self.sessions.lock();
            let session = sessions.get_mut(&r.request_header.authentication_token)?;
            if session.channel_id != chan.channel_id {
                // Transfer to a new channel: only an activated session, and only
                // from the same client certificate.
                let same_client = session.client_certificate == chan.client_certificate
                    || crate::open::same_leaf(
                        session.client_certificate.as_ref(),
                        chan.client_certificate.as_ref(),
                    );
                if !session.is_active() || !same_client {
                    return Err(ServiceError::WrongChannel);
                }
            }
            if chan.policy != SecurityPolicy::None {
                let client_cert = chan
                    .client_cert
                    .as_ref()
                    .ok_or(ServiceError::CertificateInvalid)?;
                opcua_crypto::verify_signature_data(
                    &r.client_signature,
                    chan.policy,
                    client_cert,
                    &self.endpoints.identity().cert,
                    session.server_nonce.as_ref(),
                )
                .map_err(|_| ServiceError::ApplicationSignatureInvalid)?;
            }
            (session.server_nonce.clone(), session.identity().cloned())
        };
        // Phase 2 (may await the store): the user identity.
        let (identity, credential) = self.authenticate(chan, r, &server_nonce).await?;
        if let Some(previous) = previous_identity {
            let token = r.request_header.authentication_token.clone();
            let transferring = self
                .sessions
                .lock()
                .get_mut(&token)
                .map(|s| s.channel_id != chan.channel_id)?;
            if transferring && previous != identity {
                return Err(ServiceError::IdentityChangeNotSupported);
            }
        }
        // Phase 3: commit; the nonce is replaced so it is used once only.
        let new_nonce = random::byte_string(MIN_NONCE_LEN);
        {
            let mut sessions = self.sessions.lock();
            let session = sessions.get_mut(&r.request_header.authentication_token)?;
            if session.server_nonce != server_nonce {
                // Another activation used this nonce meanwhile.
                return Err(ServiceError::NonceInvalid);
            }
            session.server_nonce = new_nonce.clone();
            let moved = session.channel_id != chan.channel_id;
            session.last_activity = Instant::now();
            session
                .client
                .activated(r.locale_ids.clone().unwrap_or_default(), &identity);
            session.phase = Phase::Active(Active {
                identity,
                credential,
            });
            if moved {
                // Publish requests queued on the old channel cannot be
                // answered on the new one: the old channel gets a fault.
                sessions.end_publishes_of(
                    &r.request_header.authentication_token,
                    StatusCode::BadSecureChannelIdInvalid,
                );
            }
            sessions.bind_channel(&r.request_header.authentication_token, chan.channel_id);
        }
        self.answer_ended_publishes();
        Ok(ActivateSessionResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            server_nonce: new_nonce,
            results: None,
            diagnostic_infos: None,
        }
        .into())
    }

    /// Validates the identity token of an ActivateSession against the
    /// endpoint's offered token policies and the store. Returns the
    /// identity and what proved it (checked again when the stored users or
    /// trust list change, see [`crate::standing`]).
    async fn authenticate(
        &self,
        chan: &ChannelInfo,
        r: &ActivateSessionRequest,
        server_nonce: &ByteString,
    ) -> Result<(UserIdentity, Credential)> {
        let offered = &chan.tokens;
        let token = &r.user_identity_token;
        let allowed = |t: UserToken, policy: &str| offered.contains(&t) && policy == policy_id(t);
        if token.is_null() || token.inner_is::<AnonymousIdentityToken>() {
            let policy = token
                .inner_as::<AnonymousIdentityToken>()
                .map(|t| t.policy_id.to_string())
                .unwrap_or_else(|| policy_id(UserToken::Anonymous).to_string());
            if !allowed(UserToken::Anonymous, &policy) {
                return Err(ServiceError::IdentityTokenInvalid("anonymous not offered"));
            }
            return Ok((UserIdentity::Anonymous, Credential::None));
        }
        if let Some(t) = token.inner_as::<UserNameIdentityToken>() {
            if !allowed(UserToken::Username, t.policy_id.as_ref()) {
                return Err(ServiceError::IdentityTokenInvalid("username not offered"));
            }
            let name = t.user_name.as_ref().to_string();
            let password = if t.encryption_algorithm.is_null() || t.encryption_algorithm.is_empty()
            {
                // A clear-text password is only acceptable inside an encrypted channel.
                if chan.mode != MessageSecurityMode::SignAndEncrypt && !chan.transport_encrypted {
                    return Err(ServiceError::IdentityTokenInvalid(
                        "unencrypted password on an unencrypted channel",
                    ));
                }
                t.password.clone()
            } else {
                legacy_decrypt_secret(t, server_nonce.as_ref(), &self.endpoints.identity().key)
                    .map_err(|_| ServiceError::IdentityTokenInvalid("password decryption failed"))?
            };
            let password = String::from_utf8(password.as_ref().to_vec())
                .map_err(|_| ServiceError::UserAccessDenied)?;
            let throttle = self.sessions.throttle();
            // One name to the throttle in any case, as to the login itself.
            let key = uagate_store::user_key(&name);
            let now = std::time::Instant::now();
            match throttle.check(&key, chan.peer, now) {
                Ok(delay) if !delay.is_zero() => tokio::time::sleep(delay).await,
                Ok(_) => {}
                Err(locked) => {
                    tracing::warn!(
                        user = %name,
                        client = ?chan.peer,
                        retry_after_s = locked.retry_after.as_secs(),
                        "user authentication refused: too many failed logins (locked out)"
                    );
                    return Err(ServiceError::UserAccessDenied);
                }
            }
            let verdict = self
                .store
                .login(&name, &password)
                .await
                .map_err(|e| ServiceError::Internal(e.to_string()))?;
            return match verdict {
                Some(login) => {
                    throttle.succeeded(&key, chan.peer);
                    Ok((
                        UserIdentity::User {
                            name: login.name,
                            role: login.role,
                        },
                        Credential::Password { stamp: login.stamp },
                    ))
                }
                None => {
                    throttle.failed(&key, chan.peer, now);
                    tracing::warn!(user = %name, "user authentication failed");
                    Err(ServiceError::UserAccessDenied)
                }
            };
        }
        if let Some(t) = token.inner_as::<X509IdentityToken>() {
            if !allowed(UserToken::X509, t.policy_id.as_ref()) {
                return Err(ServiceError::IdentityTokenInvalid("x509 not offered"));
            }
            let policy = if chan.policy == SecurityPolicy::None {
                SecurityPolicy::Basic256Sha256
            } else {
                chan.policy
            };
            verify_x509_identity_token(
                t,
                &r.user_token_signature,
                policy,
                &self.endpoints.identity().cert,
                server_nonce.as_ref(),
            )
            .map_err(|_| ServiceError::UserSignatureInvalid)?;
            let der = t.certificate_data.as_ref();
            let verdict = self
                .store
                .validate_certificate(der, chrono::Utc::now())
                .await
                .map_err(|e| ServiceError::Internal(e.to_string()))?;
            if !verdict.is_trusted() {
                if verdict == uagate_store::TrustVerdict::Untrusted {
                    let _ = self.store.record_rejected(der).await;
                }
                return Err(ServiceError::IdentityTokenRejected);
            }
            let cert = X509::from_der(der).map_err(|_| ServiceError::IdentityTokenRejected)?;
            return Ok((
                UserIdentity::Certificate {
                    thumbprint: cert.thumbprint().as_hex_string(),
                },
                Credential::Certificate {
                    der: t.certificate_data.clone(),
                },
            ));
        }
        Err(ServiceError::IdentityTokenInvalid(
            "unsupported identity token",
        ))
    }

    fn close_session(
        &self,
        chan: &ChannelInfo,
        r: &CloseSessionRequest,
    ) -> Result<ResponseMessage> {
        let count = self.sessions.close(
            chan,
            &r.request_header.authentication_token,
            r.delete_subscriptions,
        )?;
        self.answer_ended_publishes();
        self.space.publish_session_count(count);
        Ok(CloseSessionResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
        }
        .into())
    }

    fn cancel(&self, chan: &ChannelInfo, r: &CancelRequest) -> Result<ResponseMessage> {
        // Requests of a channel run to completion in arrival order, so when
        // Cancel is processed there is no earlier request left to cancel.
        self.sessions
            .with_session(chan, &r.request_header, |_| Ok(()))?;
        Ok(CancelResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            cancel_count: 0,
        }
        .into())
    }

    fn register_nodes(
        &self,
        chan: &ChannelInfo,
        r: &RegisterNodesRequest,
    ) -> Result<ResponseMessage> {
        let nodes = r.nodes_to_register.as_deref().unwrap_or(&[]);
        let space = self.space.local();
        check_count(nodes.len(), space.limits().max_nodes_per_register)?;
        self.sessions
            .with_session(chan, &r.request_header, |_| Ok(()))?;
        Ok(RegisterNodesResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
            registered_node_ids: Some(space.register(nodes)),
        }
        .into())
    }

    fn unregister_nodes(
        &self,
        chan: &ChannelInfo,
        r: &UnregisterNodesRequest,
    ) -> Result<ResponseMessage> {
        let nodes = r.nodes_to_unregister.as_deref().unwrap_or(&[]);
        let space = self.space.local();
        check_count(nodes.len(), space.limits().max_nodes_per_register)?;
        self.sessions
            .with_session(chan, &r.request_header, |_| Ok(()))?;
        space.unregister(nodes);
        Ok(UnregisterNodesResponse {
            response_header: ResponseHeader::new_good(&r.request_header),
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opcua_types::{AdditionalParametersType, Variant};

    fn retry_after_ms(response: &ResponseMessage) -> Option<i64> {
        let ResponseMessage::ServiceFault(f) = response else {
            return None;
        };
        let params = f
            .response_header
            .additional_header
            .inner_as::<AdditionalParametersType>()?;
        params
            .parameters
            .as_ref()?
            .iter()
            .find_map(|p| match (p.key.name.as_ref(), &p.value) {
                ("RetryAfterMs", Variant::Int64(ms)) => Some(*ms),
                _ => None,
            })
    }

    #[test]
    fn every_too_busy_fault_carries_the_retry_hint() {
        let header = RequestHeader {
            request_handle: 7,
            ..Default::default()
        };
        // A SessionEstablishment refusal goes through here.
        let busy = fault(
            &header,
            &ServiceError::Status(StatusCode::BadServerTooBusy),
            Duration::from_millis(1234),
        );
        assert_eq!(
            busy.response_header().service_result,
            StatusCode::BadServerTooBusy
        );
        assert_eq!(busy.response_header().request_handle, 7);
        assert_eq!(retry_after_ms(&busy), Some(1234));
        // Other faults carry no hint.
        let other = fault(
            &header,
            &ServiceError::Status(StatusCode::BadSessionIdInvalid),
            Duration::from_millis(1234),
        );
        assert_eq!(retry_after_ms(&other), None);
    }
}
