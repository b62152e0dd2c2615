//! Routing: each packet decoded and routed once ([`placement::route`] of its request's
//! target), and the destination of a crud point op, whose key crud encodes.

use super::Session;
use crate::crud;
use crate::placement::{self, Destination};
use crate::protocol::RequestTarget;
use crate::server::decoded::Decoded;

impl Session {
    /// Routes a decoded packet: where it runs, and its request's target (for the
    /// fetch-ahead; [`RequestTarget::NoData`] for a packet that did not decode, whose error
    /// is answered here).
    #[inline(always)]
    pub(super) fn route<'p>(&self, decoded: &Decoded<'p>) -> (Destination, RequestTarget<'p>) {
        let target = match decoded {
            Ok((_, request)) => request.target(),
            Err(_) => RequestTarget::NoData,
        };
        let route = placement::route(&target, &self.core.catalog(), self.core.id());
        (route, target)
    }

    /// Where a crud point op runs (see [`crud::write::PointOp::route`]).
    pub(super) fn route_crud_op(&self, space_id: u32, op: &crud::write::PointOp) -> Destination {
        let shard = self.core.shard.borrow();
        op.route(
            &self.core.catalog(),
            &shard.engine,
            space_id,
            self.core.id(),
        )
    }
}
