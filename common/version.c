#include "erma/version.h"

const char *erma_version(void)
{
    return ERMA_VERSION;
}
