#!/usr/bin/env tarantool
-- Reference Tarantool instance for tarn's tests and benchmark comparisons.
--
-- Usage: tarantool instance.lua [PORT [WORK_DIR]]
-- Env (used when an argument is absent):
--   TARANTOOL_PORT           listen port (default 3301); may also be host:port
--   TARANTOOL_WORK_DIR       work_dir for snapshots/xlogs/logs (default: cwd)
--   TARANTOOL_WAL_MODE       'none' (default), 'write' or 'fsync'
--   TARANTOOL_MEMTX_MEMORY   bytes (default 1 GiB)
--   TARANTOOL_LOG            log destination (default <work_dir>/tarantool.log)
--   TARANTOOL_NET_MSG_MAX    requests in flight the network thread admits (default 768,
--                            Tarantool's own default)
--   TARANTOOL_EXTRA_SCHEMA   a Lua file run once after the schema below, before the ready
--                            marker (tests/differential/schema.lua: the differential test's
--                            spaces beyond the shipped ones)
--   TARANTOOL_READ_ONLY      '1': box.cfg{read_only = true} once the schema and users are
--                            made, before the ready marker (tests/python/test_read_only.py)
--
-- Schema (identical to what tarn exposes to its tests):
--   kv        id 512: id unsigned, bucket_id unsigned, value string
--             primary TREE(id)
--   customers id 513: id, bucket_id, a, b, c, d unsigned, name string
--             primary TREE(id); composite TREE non-unique (a,b,c,d,name);
--             bucket_id TREE non-unique (bucket_id)
--   guest and bench/secret: read,write,execute on universe.
-- An admin console listens on <work_dir>/admin.sock.

local fio = require('fio')

local port = arg[1] or os.getenv('TARANTOOL_PORT') or '3301'
local work_dir = arg[2] or os.getenv('TARANTOOL_WORK_DIR') or fio.cwd()
local wal_mode = os.getenv('TARANTOOL_WAL_MODE') or 'none'
local memtx_memory = tonumber(os.getenv('TARANTOOL_MEMTX_MEMORY') or '')
    or 1024 * 1024 * 1024
local log = os.getenv('TARANTOOL_LOG') or fio.pathjoin(work_dir, 'tarantool.log')
local net_msg_max = tonumber(os.getenv('TARANTOOL_NET_MSG_MAX') or '') or 768
local extra_schema = os.getenv('TARANTOOL_EXTRA_SCHEMA')

if not fio.path.is_dir(work_dir) then
    assert(fio.mktree(work_dir), 'cannot create work dir ' .. work_dir)
end

box.cfg{
    listen = port,
    work_dir = work_dir,
    memtx_memory = memtx_memory,
    wal_mode = wal_mode,
    log = log,
    pid_file = fio.pathjoin(work_dir, 'tarantool.pid'),
    checkpoint_interval = 0,
    net_msg_max = net_msg_max,
}

box.once('tarn_reference_schema_v1', function()
    local kv = box.schema.space.create('kv', {
        id = 512,
        format = {
            {name = 'id', type = 'unsigned'},
            {name = 'bucket_id', type = 'unsigned'},
            {name = 'value', type = 'string'},
        },
    })
    kv:create_index('primary', {type = 'TREE', parts = {'id'}})

    local customers = box.schema.space.create('customers', {
        id = 513,
        format = {
            {name = 'id', type = 'unsigned'},
            {name = 'bucket_id', type = 'unsigned'},
            {name = 'a', type = 'unsigned'},
            {name = 'b', type = 'unsigned'},
            {name = 'c', type = 'unsigned'},
            {name = 'd', type = 'unsigned'},
            {name = 'name', type = 'string'},
        },
    })
    customers:create_index('primary', {type = 'TREE', parts = {'id'}})
    customers:create_index('composite', {
        type = 'TREE', unique = false,
        parts = {'a', 'b', 'c', 'd', 'name'},
    })
    customers:create_index('bucket_id', {
        type = 'TREE', unique = false, parts = {'bucket_id'},
    })

    box.schema.user.grant('guest', 'read,write,execute', 'universe')
    box.schema.user.create('bench', {password = 'secret'})
    box.schema.user.grant('bench', 'read,write,execute', 'universe')
end)

if extra_schema ~= nil and extra_schema ~= '' then
    box.once('tarn_extra_schema:' .. extra_schema, function() dofile(extra_schema) end)
end

-- Make the `bench` password authoritative even on an existing work dir.
box.schema.user.passwd('bench', 'secret')
-- `bench` may make schema changes (tests/python/test_ddl.py); tarn lets a user with the
-- write grant make them.
box.schema.user.grant('bench', 'create,alter,drop', 'universe', nil, {if_not_exists = true})

if os.getenv('TARANTOOL_READ_ONLY') == '1' then
    box.cfg{read_only = true}
end

-- Admin console (full privileges, text protocol) for scripts that need DDL,
-- e.g. capture_reference.py: <work_dir>/admin.sock
require('console').listen('unix/:' .. fio.pathjoin(work_dir, 'admin.sock'))

-- Readiness marker for start.sh: the schema and users above now exist.
local ready = fio.pathjoin(work_dir, 'ready')
local f = assert(io.open(ready, 'w'))
f:write(tostring(box.info.pid), '\n')
f:close()
