//! CALL: the functions a session answers (`box.info`, `box.snapshot`), the crud calls and
//! `box.space`'s data methods, planned here and run here, on their owner, or on every core.

use super::admit::{access_denied, READ_ONLY_MESSAGE};
use super::{Pending, PendingReply, Session, Unacknowledged, Wait};
use crate::crud::box_schema::SchemaPlan;
use crate::crud::{self, CrudReply, FanOutPlan, Plan};
use crate::msgpack::write_str;
use crate::placement::{self, Destination, SpacePlacement};
use crate::protocol::reply;
use crate::protocol::request::{Call, Request};
use crate::protocol::ErrorCode;
use crate::server::mesh::batch::Kind;
use crate::server::mesh::crud_payloads;
use crate::server::users::Access;

impl Session {
    pub(super) async fn call(
        &mut self,
        packet: &[u8],
        call: &Call<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        let function_name = call.function_name;
        let grants = &self.core.shared.users.get(self.user_id).grants;
        if !grants.execute {
            if crate::protocol::crud_call::is_torn(call.args) {
                // The general decoder would have refused the packet before this check.
                let error = crate::protocol::crud_call::torn_args_error();
                return reply::encode_protocol_error(out, sync, self.core.schema_version(), &error);
            }
            return access_denied(
                out,
                sync,
                self.core.schema_version(),
                Access::Execute,
                "function",
                function_name,
                self.user_name(),
            );
        }
        if crud::is_crud_function(function_name) {
            // crud runs its box operations as vshard's storage user, not the caller: the
            // execute grant is the only check, as on a Tarantool router.
            return self.crud(packet, call, sync, out).await;
        }
        if crud::box_schema::is_schema_function(function_name) {
            return self.schema_call(call, sync, out).await;
        }
        if crud::box_space::is_box_space_function(function_name) {
            return self.box_space(packet, call, sync, out).await;
        }
        match function_name {
            "box.info" | "box.info.call" => self.box_info(sync, out),
            "box.snapshot" => {
                // Writes acknowledged so far are in the snapshot's LSN range.
                self.finish(out).await;
                match crate::server::durability::request_snapshot(&self.core.shared).await {
                    Ok(()) => {
                        let mark =
                            reply::begin_data_reply(out, sync, self.core.schema_version(), 1);
                        write_str(out, b"ok");
                        reply::finish_packet(out, mark);
                    }
                    Err(reason) => reply::encode_error(
                        out,
                        sync,
                        self.core.schema_version(),
                        ErrorCode::ER_WAL_IO,
                        &format!("Failed to write to disk: snapshot: {reason}"),
                    ),
                }
            }
            "box.ctl.promote" => self.promote(sync, out).await,
            _ => reply::encode_error(
                out,
                sync,
                self.core.schema_version(),
                ErrorCode::ER_NO_SUCH_PROC,
                &format!("Procedure '{function_name}' is not defined"),
            ),
        }
    }

    /// `box.ctl.promote()`: this instance becomes the writable master of a new term once
    /// its applier applied what it received, after this connection's earlier requests are
    /// answered. Answers nothing, as Tarantool's (2.10+); a failure is ER_SYSTEM with why.
    async fn promote(&mut self, sync: u64, out: &mut Vec<u8>) {
        self.finish(out).await;
        let schema_version = self.core.schema_version();
        match crate::server::replication::promote::promote(&self.core.shared).await {
            Ok(_term) => {
                let mark = reply::begin_data_reply(out, sync, schema_version, 0);
                reply::finish_packet(out, mark);
            }
            Err(error) => {
                let message = format!("box.ctl.promote: {error}");
                reply::encode_error(out, sync, schema_version, ErrorCode::ER_SYSTEM, &message);
            }
        }
    }

    /// A crud CALL (spec §18): planned here, then run where its data is (see `crud`).
    pub(super) async fn crud(
        &mut self,
        packet: &[u8],
        call: &Call<'_>,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        let planned = {
            let shard = self.core.shard.borrow();
            crud::plan(
                &shard.engine,
                &self.core.crud,
                call.function_name,
                call.args,
            )
        };
        match planned {
            Ok(plan) if self.refuse_read_only_plan(&plan, sync, out) => {}
            Ok(plan) => self.run_plan(packet, plan, sync, out).await,
            Err(raised) => crud::encode_reply(
                out,
                sync,
                self.core.schema_version(),
                &CrudReply::Raised(raised),
            ),
        }
    }

    /// A `box.space` data method over CALL (`crud::box_space`): run as the caller, so it
    /// needs the grants the request it amounts to needs.
    async fn box_space(&mut self, packet: &[u8], call: &Call<'_>, sync: u64, out: &mut Vec<u8>) {
        let planned = {
            let shard = self.core.shard.borrow();
            crud::box_space::plan(&shard.engine, call.function_name, call.args)
        };
        let plan = match planned {
            Ok(plan) => plan,
            // Tarantool refuses a system space's truncate in its `_truncate` trigger: after
            // the read-only check of the write to `_truncate`.
            Err(raised)
                if raised.code == ErrorCode::ER_TRUNCATE_SYSTEM_SPACE && self.writes_refused() =>
            {
                return super::admit::read_only(out, sync, self.core.schema_version());
            }
            Err(raised) => {
                return crud::encode_reply(
                    out,
                    sync,
                    self.core.schema_version(),
                    &CrudReply::Raised(raised),
                )
            }
        };
        // Tarantool refuses a write on a read-only instance before it checks the grant.
        if self.refuse_read_only_plan(&plan, sync, out) {
            return;
        }
        let checked = match &plan {
            Plan::Len { space_id } => Some((Access::Read, *space_id)),
            Plan::Sum(sum) => Some((Access::Read, sum.space_id())),
            Plan::Truncate { space_id, .. } => Some((Access::Write, *space_id)),
            // A select or a write: its own admission checks its grant.
            _ => None,
        };
        if let Some((access, space_id)) = checked {
            if !self.check_access(access, space_id, sync, out) {
                return;
            }
            let catalog = &self.core.catalog();
            if catalog.placement(space_id) == SpacePlacement::Everywhere {
                // Every shard holds it whole: one shard's count is the answer.
                return self.crud_here(&plan, sync, out);
            }
        }
        self.run_plan(packet, plan, sync, out).await
    }

    /// A DDL call (`crud::box_schema`): planned and made in the server's one turn for schema
    /// changes, after this connection's earlier requests are answered (as `box.snapshot`
    /// does), then answered from the new schema. Needs the write grant (Tarantool's create,
    /// alter and drop privileges have no counterpart in tarn's grants). On a read-only
    /// instance, whoever asks, a call is refused with 7 where Tarantool's first write to a
    /// system space is: after the checks of its Lua (`box_schema::raised_before_writing`);
    /// one that writes nothing (`if_not_exists` finding what it asks for) is answered.
    async fn schema_call(&mut self, call: &Call<'_>, sync: u64, out: &mut Vec<u8>) {
        let refused_at_start = self.writes_refused();
        if !refused_at_start && !self.grants().write {
            let user = self.user_name().to_owned();
            let version = self.core.schema_version();
            return access_denied(out, sync, version, Access::Write, "universe", "", &user);
        }
        self.finish(out).await;
        let core = self.core.clone();
        let turn = core.shared.ddl.take_turn().await;
        let planned = {
            let shard = core.shard.borrow();
            let catalog = core.catalog();
            crud::box_schema::plan(&shard.engine, &catalog, call.function_name, call.args)
        };
        // Read-only now, or at the start (when the grant was not checked).
        let refused = refused_at_start || self.writes_refused();
        let reply = match planned {
            Ok(SchemaPlan::Unchanged(reply)) => reply,
            Ok(SchemaPlan::Change { .. } | SchemaPlan::Rewritten(_)) if refused => {
                return super::admit::read_only(out, sync, core.schema_version());
            }
            Err(raised)
                if refused
                    && !crud::box_schema::raised_before_writing(call.function_name, &raised) =>
            {
                return super::admit::read_only(out, sync, core.schema_version());
            }
            Ok(SchemaPlan::Rewritten(reply)) => reply,
            Ok(SchemaPlan::Change { change, reply }) => {
                match crate::server::ddl::change(&core, &turn, change).await {
                    Ok(()) => reply,
                    Err(error) => {
                        let version = core.schema_version();
                        return reply::encode_error(
                            out,
                            sync,
                            version,
                            error.code(),
                            &error.to_string(),
                        );
                    }
                }
            }
            Err(raised) => {
                let version = core.schema_version();
                return crud::encode_reply(out, sync, version, &CrudReply::Raised(raised));
            }
        };
        drop(turn);
        let mut values = Vec::new();
        let count =
            crate::server::ddl::encode_reply(&core.shard.borrow().engine, reply, &mut values);
        let mark = reply::begin_data_reply(out, sync, core.schema_version(), count);
        out.extend_from_slice(&values);
        reply::finish_packet(out, mark);
    }

    /// On a read-only instance, refuses a planned call that writes before it is routed
    /// (`crud::refuse_writes` says how each answers): true when the refusal is in `out`.
    fn refuse_read_only_plan(&self, plan: &Plan<'_>, sync: u64, out: &mut Vec<u8>) -> bool {
        if !self.writes_refused() {
            return false;
        }
        let refused = crud::refuse_writes(
            &self.core.shard.borrow().engine,
            &self.core.crud,
            plan,
            ErrorCode::ER_READONLY,
            READ_ONLY_MESSAGE,
        );
        match refused {
            Some(reply) => {
                crud::encode_reply(out, sync, self.core.schema_version(), &reply);
                true
            }
            None => false,
        }
    }

    /// Runs a planned call: here, on its owner, or on every core.
    async fn run_plan(&mut self, packet: &[u8], plan: Plan<'_>, sync: u64, out: &mut Vec<u8>) {
        match &plan {
            Plan::BoxSelect(select) => self.box_select(select, sync, out).await,
            Plan::BoxWrite(write) => self.box_request(&write.request(), sync, out).await,
            Plan::Reply(_) => self.crud_here(&plan, sync, out),
            Plan::Point(point) => match self.route_crud_op(point.space_id, &point.op) {
                Destination::Owner(owner) => {
                    // The owner runs the plan made here: it does not decode or plan again.
                    let slot = self
                        .core
                        .queue_with(owner, Kind::CrudPoint, &self.inbox, |batch| {
                            crud_payloads::encode_point(batch, sync, point)
                        });
                    self.pending.push(Pending {
                        at: out.len(),
                        reply: PendingReply::Slot(slot),
                    });
                }
                Destination::Here | Destination::EveryCore => self.crud_here(&plan, sync, out),
            },
            _ if placement::route_to_every_core(&self.core.catalog()) == Destination::Here => {
                self.crud_here(&plan, sync, out)
            }
            Plan::Many(_) => self.crud_many(&plan, sync, out).await,
            _ => match plan.into_fan_out() {
                FanOutPlan::Read(read) => {
                    if let Some(Wait::Finish) = self.start_crud_read(packet, read, sync, out) {
                        self.finish(out).await;
                    }
                }
                FanOutPlan::Other(writing) => self.crud_fan_out(packet, &writing, sync, out).await,
            },
        }
    }

    /// A `box.space` read that is a select, answered as the IPROTO SELECT it is: admitted
    /// (the read grant), routed and merged as any; its tuples then made the one list that
    /// `select` returns (after a `finish`, so that its reply is the last in `out`).
    async fn box_select(
        &mut self,
        select: &crud::box_space::BoxSelect,
        sync: u64,
        out: &mut Vec<u8>,
    ) {
        if select.one_list {
            self.finish(out).await;
        }
        let start = out.len();
        let request = Request::Select(select.request());
        self.box_request(&request, sync, out).await;
        if select.one_list {
            self.finish(out).await;
            reply::wrap_data_in_one_list(out, start);
        }
    }

    /// A `box.space` method run as the IPROTO request it is, from its packet: admitted (the
    /// caller's grants), routed and answered as one a client sent.
    async fn box_request(&mut self, request: &Request<'_>, sync: u64, out: &mut Vec<u8>) {
        let mut framed = Vec::new();
        crate::protocol::client::encode_request(&mut framed, sync, request);
        // A session is handed packets without their size prefix.
        let packet = &framed[5..];
        if let Some(deferred) = self.start(packet, &super::decode(packet), None, None, out) {
            self.wait(packet, deferred.wait, out).await;
        }
    }

    /// Runs a crud plan wholly on this core's shard; the reply waits for its commit like a
    /// local IPROTO write.
    pub(super) fn crud_here(&mut self, plan: &Plan, sync: u64, out: &mut Vec<u8>) {
        let start = out.len();
        let work = crud::Work::Call {
            plan,
            sync,
            schema_version: self.core.schema_version(),
            out,
        };
        let ran = crud::run(&mut self.core.shard.borrow_mut(), &self.core.crud, work);
        if let Some(commit) = ran.commit {
            self.unacknowledged.push(Unacknowledged {
                commit,
                start,
                end: out.len(),
                sync,
            });
        }
    }
}
