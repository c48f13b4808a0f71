//! The output queues the per-migration state machines write into.

use std::collections::VecDeque;

use ferry_proto::{MigrationId, NodeId};

use crate::config::Config;
use crate::report::{MigrationEvent, Phase, Role};
use crate::wire::{Body, Message};

/// Output queues the per-migration state machines write into.
pub(crate) struct Out<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) me: &'a NodeId,
    transmits: &'a mut VecDeque<(NodeId, Message)>,
    events: &'a mut VecDeque<MigrationEvent>,
}

impl<'a> Out<'a> {
    /// The queues of a [`super::Migrator`], for one call into its machines.
    pub(super) fn new(
        cfg: &'a Config,
        me: &'a NodeId,
        transmits: &'a mut VecDeque<(NodeId, Message)>,
        events: &'a mut VecDeque<MigrationEvent>,
    ) -> Self {
        Self {
            cfg,
            me,
            transmits,
            events,
        }
    }

    pub(crate) fn send(&mut self, to: &NodeId, id: &MigrationId, body: Body) {
        self.transmits
            .push_back((to.clone(), Message::new(id.clone(), body)));
    }

    pub(crate) fn accepted(&mut self, id: &MigrationId, prepare: &crate::wire::Prepare) {
        self.events.push_back(MigrationEvent::Accepted {
            id: id.clone(),
            session: prepare.session.clone(),
            source: prepare.source.clone(),
            mode: prepare.mode,
            trace_parent: prepare.trace_parent.clone(),
        });
    }

    pub(crate) fn phase(&mut self, id: &MigrationId, role: Role, phase: Phase) {
        self.events.push_back(MigrationEvent::Phase {
            id: id.clone(),
            role,
            phase,
        });
    }
}
