/* Module images (modules.c). */
#ifndef CUDUMP_MODULES_H
#define CUDUMP_MODULES_H

#include "functab.h"

/* Keeps what a module load was given (OPTION_CAPTURE only). */
void modules_add(uintptr_t handle, const void *image, const char *path);
/* Sends the image of e's module to the controller (once per module; a header
 * alone for later functions of the same module). */
void modules_send(struct func_entry *e);
void modules_reset_after_fork(void);

#endif
