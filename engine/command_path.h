/* command_path.h — where a command step's program is: its argv[0] looked up
 * in PATH once per name, as a shell's command hash does, instead of at every
 * spawn.
 *
 * posix_spawnp tries execve in each PATH directory in turn, in the child,
 * while flow (the parent, suspended by vfork until the exec) waits: with
 * /usr/bin ninth in PATH, that is eight failed execs per step.  The lookup
 * here stats the same directories once, in the same order, and keeps what it
 * found; the step then runs through posix_spawn with that path.  It answers
 * NULL — posix_spawnp decides, as before — for a name holding a '/', a PATH
 * with an empty or relative entry (those name the step's working directory,
 * not flow's), or a name it does not find.  The table follows flow's own
 * PATH (posix_spawnp's), cleared when that changes; only what was found is
 * kept, and a path that is gone by the time it runs is forgotten
 * (command_path_forget) and the spawn tried again with posix_spawnp.  As with
 * a shell's hash, a program installed later in an earlier PATH directory is
 * not seen until the next run. */
#ifndef FLOW_COMMAND_PATH_H
#define FLOW_COMMAND_PATH_H

/* The absolute path to run for `name`, valid until the next call here; or NULL. */
const char *command_path_find(const char *name);
/* The path found for `name` could not be run: look it up again next time. */
void command_path_forget(const char *name);
/* Frees the table (tests; flow never needs to). */
void command_path_reset(void);

#endif
