//! `Server/ServerRedundancy` (i=2296) per OPC UA Part 5 6.3.7-6.3.9: its
//! TypeDefinition and properties follow the configured RedundancySupport.
//!
//! | RedundancySupport             | TypeDefinition                         | Properties (besides RedundancySupport)         |
//! |-------------------------------|----------------------------------------|------------------------------------------------|
//! | None                          | ServerRedundancyType (i=2034)          | none                                           |
//! | Cold, Warm, Hot, HotAndMirrored | NonTransparentRedundancyType (i=2039) | ServerUriArray (i=11314); RedundantServerArray (i=11313) when servers are given |
//! | Transparent                   | TransparentRedundancyType (i=2036)     | CurrentServerId (i=11312), RedundantServerArray (i=11313) |
//!
//! The property nodes exist in the standard node set; only the references
//! from i=2296 change. Their values are computed at read time.

use opcua_types::{
    NodeId, ObjectId, ObjectTypeId, RedundancySupport, RedundantServerDataType, ReferenceTypeId,
    ServerState, VariableId,
};

use crate::LocalSpace;

/// Redundancy configuration published under `Server/ServerRedundancy`.
#[derive(Debug, Clone)]
pub(crate) struct RedundancyState {
    pub(crate) support: RedundancySupport,
    pub(crate) server_uris: Vec<String>,
    pub(crate) current_server_id: String,
    pub(crate) redundant: Vec<RedundantServerDataType>,
}

impl Default for RedundancyState {
    fn default() -> Self {
        Self {
            support: RedundancySupport::None,
            server_uris: Vec::new(),
            current_server_id: String::new(),
            redundant: Vec::new(),
        }
    }
}

impl LocalSpace {
    /// Configures `Server/ServerRedundancy` (see the module table).
    ///
    /// Called by the engine at start-up and whenever the redundant set
    /// changes. `server_uris` is `ServerUriArray` (non-transparent modes);
    /// `current_server_id` is `CurrentServerId` (transparent mode);
    /// `redundant` lists `(ServerId, ServiceLevel, ServerState)` of the set's
    /// members for `RedundantServerArray`.
    pub fn set_redundancy(
        &mut self,
        support: RedundancySupport,
        server_uris: &[String],
        current_server_id: &str,
        redundant: &[(String, u8, ServerState)],
    ) {
        self.rt.redundancy = RedundancyState {
            support,
            server_uris: server_uris.to_vec(),
            current_server_id: current_server_id.to_string(),
            redundant: redundant
                .iter()
                .map(|(id, level, state)| RedundantServerDataType {
                    server_id: id.as_str().into(),
                    service_level: *level,
                    server_state: *state,
                })
                .collect(),
        };
        self.link_redundancy_nodes();
    }

    /// Sets `ServerRedundancy/RedundancySupport` keeping the other
    /// redundancy settings (default `None`).
    pub fn set_redundancy_support(&mut self, support: RedundancySupport) {
        self.rt.redundancy.support = support;
        self.link_redundancy_nodes();
    }

    /// Re-creates the HasTypeDefinition and HasProperty references of
    /// i=2296 for the current RedundancySupport.
    pub(crate) fn link_redundancy_nodes(&mut self) {
        let obj: NodeId = ObjectId::Server_ServerRedundancy.into();
        let types: [NodeId; 3] = [
            ObjectTypeId::ServerRedundancyType.into(),
            ObjectTypeId::TransparentRedundancyType.into(),
            ObjectTypeId::NonTransparentRedundancyType.into(),
        ];
        let current_id: NodeId = VariableId::Server_ServerRedundancy_CurrentServerId.into();
        let servers: NodeId = VariableId::Server_ServerRedundancy_RedundantServerArray.into();
        let uris: NodeId = VariableId::Server_ServerRedundancy_ServerUriArray.into();
        let has_td: NodeId = ReferenceTypeId::HasTypeDefinition.into();
        let has_prop: NodeId = ReferenceTypeId::HasProperty.into();
        for t in &types {
            self.space.delete_reference(&obj, t, &has_td);
        }
        for p in [&current_id, &servers, &uris] {
            self.space.delete_reference(&obj, p, &has_prop);
        }
        let state = &self.rt.redundancy;
        let (ty, props): (&NodeId, Vec<&NodeId>) = match state.support {
            RedundancySupport::None => (&types[0], vec![]),
            RedundancySupport::Transparent => (&types[1], vec![&current_id, &servers]),
            _ if state.redundant.is_empty() => (&types[2], vec![&uris]),
            _ => (&types[2], vec![&uris, &servers]),
        };
        self.space.insert_reference(&obj, ty, &has_td);
        for p in props {
            self.space.insert_reference(&obj, p, &has_prop);
        }
    }
}
