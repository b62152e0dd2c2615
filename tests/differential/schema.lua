-- The differential test's spaces beyond the shipped ones, for Tarantool: the same spaces
-- tests/differential/schema.toml gives tarn. Run by scripts/tarantool/instance.lua through
-- TARANTOOL_EXTRA_SCHEMA, inside box.once, after the shipped schema. Field order: see
-- schema.toml.

local typed = box.schema.space.create('typed', {
    id = 520,
    format = {
        {name = 'id', type = 'unsigned'},
        {name = 'i', type = 'integer'},
        {name = 'n', type = 'number'},
        {name = 's', type = 'string'},
        {name = 'b', type = 'boolean'},
        {name = 'v', type = 'varbinary'},
        {name = 'sc', type = 'scalar'},
        {name = 'dec', type = 'decimal'},
        {name = 'arr', type = 'array'},
        {name = 'm', type = 'map'},
        {name = 'a', type = 'any'},
        {name = 'ns', type = 'string', is_nullable = true},
        {name = 'u', type = 'uuid'},
        {name = 'd', type = 'double'},
    },
})
typed:create_index('primary', {type = 'TREE', parts = {'id'}})
typed:create_index('by_i', {type = 'TREE', unique = false, parts = {'i'}})
typed:create_index('by_n', {type = 'TREE', unique = false, parts = {'n'}})
typed:create_index('by_s_ci', {
    type = 'TREE', unique = false, parts = {{'s', 'string', collation = 'unicode_ci'}},
})
typed:create_index('by_sc', {type = 'TREE', unique = false, parts = {'sc'}})
typed:create_index('by_ns_b', {
    type = 'TREE', unique = false,
    parts = {{'ns', 'string', is_nullable = true}, {'b', 'boolean'}},
})
typed:create_index('by_u_dec_v', {type = 'TREE', unique = false, parts = {'u', 'dec', 'v'}})

local hashed = box.schema.space.create('hashed', {
    id = 521,
    format = {
        {name = 'k1', type = 'unsigned'},
        {name = 'k2', type = 'string'},
        {name = 'val', type = 'scalar', is_nullable = true},
        {name = 'tag', type = 'unsigned'},
    },
})
hashed:create_index('pk', {type = 'HASH', parts = {'k1', 'k2'}})
hashed:create_index('by_val', {
    type = 'TREE', unique = false, parts = {{'val', 'scalar', is_nullable = true}},
})

local single = box.schema.space.create('single', {
    id = 522,
    format = {
        {name = 'id', type = 'integer'},
        {name = 'code', type = 'string'},
        {name = 'num', type = 'unsigned'},
    },
})
single:create_index('primary', {type = 'TREE', parts = {'id'}})
single:create_index('by_code', {type = 'HASH', parts = {'code'}})
single:create_index('by_num', {type = 'TREE', parts = {'num'}})
