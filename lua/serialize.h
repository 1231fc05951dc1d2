/* serialize.h — Lua values written as Lua source ("return <expr>") and read
 * back safely: the cache stores a Lua step's outputs this way. */
#ifndef FLOW_SERIALIZE_H
#define FLOW_SERIALIZE_H

#include <lua.h>
#include <stddef.h>

/* Pushes a chunk "return <expr>" that rebuilds the value at idx and returns 1,
 * or pushes a message saying where the value holds something that cannot be
 * written (a function, a userdata, a cycle, ...) and returns 0.  The same value
 * always gives the same bytes. */
int flow_serialize(lua_State *L, int idx);
/* The same, giving up (0, with a message) once the text would take more
 * than max_len bytes: a large value costs no more than that much work. */
int flow_serialize_max(lua_State *L, int idx, size_t max_len);

/* Runs `text` as a text chunk with an empty environment and pushes the one
 * value it returns (returns 1), or pushes "NAME:..." saying why it could not
 * (returns 0). */
int flow_deserialize(lua_State *L, const char *text, size_t len, const char *name);

#endif
