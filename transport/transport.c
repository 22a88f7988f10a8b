#include "erma/sdk/transport_driver.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "erma/errors.h"
#include "erma/log.h"
#include "erma/sdk/rand.h"
#include "erma/version.h"
#include "transport/builtin.h"
#include "transport/module.h"

static const struct erma_transport_ops *const builtin[] = {&erma__udp_ops, &erma__sim_ops};

/* Transports in modules, loaded on first use (module.h). */
static struct module {
    const char *scheme;
    const struct erma_transport_ops *ops;
    bool tried;
} modules[] = {{"dpdk", NULL, false}, {"verbs", NULL, false}};
static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;

#define NMODULES (sizeof modules / sizeof modules[0])

/* Opens dir/erma_SCHEME.so; NULL with why in err when it cannot. */
static const struct erma_transport_ops *module_open(const char *dir, const char *scheme,
                                                    char *err, size_t errlen)
{
    char path[PATH_MAX];
    const int len = snprintf(path, sizeof path, "%s/erma_%s.so", dir, scheme);
    if (len < 0 || (size_t)len >= sizeof path || access(path, F_OK) != 0) {
        snprintf(err, errlen, "no %s", path);
        return NULL;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "%s", dlerror());
        return NULL;
    }
    const struct erma_transport_module *m = dlsym(h, ERMA_MODULE_SYMBOL);
    if (!m || m->abi != ERMA_MODULE_ABI || strcmp(m->version, ERMA_VERSION) != 0 ||
        strcmp(m->ops->scheme, scheme) != 0) {
        snprintf(err, errlen, "%s is not an erma %s transport module of version %s", path,
                 scheme, ERMA_VERSION);
        dlclose(h);
        return NULL;
    }
    m->set_log_level(erma_log_get_level());
    return m->ops; /* the module stays loaded for the life of the process */
}

/* Writes into dir the folder of the file at path (a program or liberma.so)
 * followed by rel. */
static void beside(const char *path, const char *rel, char *dir)
{
    const char *slash = strrchr(path, '/');
    const int n = slash ? (int)(slash - path) : 0;
    snprintf(dir, PATH_MAX, "%.*s%s", n < PATH_MAX - 32 ? n : PATH_MAX - 32, path, rel);
}

#define MODULE_DIRS 3

/* The folders a module is looked for in: $ERMA_MODULE_DIR alone when set,
 * else erma/ beside liberma.so (or the program that erma is linked into),
 * the folder erma was installed to, and lib/erma beside the program's own
 * folder (programs in a build tree, or in an installation's bin/). */
static unsigned module_dirs(char dirs[MODULE_DIRS][PATH_MAX])
{
    const char *env = getenv("ERMA_MODULE_DIR");
    if (env && *env) {
        snprintf(dirs[0], PATH_MAX, "%s", env);
        return 1;
    }
    unsigned n = 0;
    Dl_info self;
    if (dladdr((void *)erma_transport_open, &self) && self.dli_fname &&
        strchr(self.dli_fname, '/'))
        beside(self.dli_fname, "/erma", dirs[n++]);
    snprintf(dirs[n++], PATH_MAX, "%s", ERMA_MODULE_INSTALL_DIR);
    char exe[PATH_MAX];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        beside(exe, "/../lib/erma", dirs[n++]);
    }
    return n;
}

static const struct erma_transport_ops *module_load(struct module *m)
{
    char dirs[MODULE_DIRS][PATH_MAX], why[MODULE_DIRS * (PATH_MAX + 128)] = "";
    const unsigned n = module_dirs(dirs);
    for (unsigned i = 0; i < n && !m->ops; i++) {
        char err[PATH_MAX + 128];
        m->ops = module_open(dirs[i], m->scheme, err, sizeof err);
        const size_t used = strlen(why);
        if (!m->ops)
            snprintf(why + used, sizeof why - used, "%s%s", used ? "; " : "", err);
    }
    if (!m->ops)
        ERMA_ERROR("transport %s://: cannot load its module erma_%s.so (%s); "
                   "ERMA_MODULE_DIR may name the folder that holds it",
                   m->scheme, m->scheme, why);
    return m->ops;
}

/* The ops for a scheme of n bytes, loading its module the first time. */
static const struct erma_transport_ops *find_scheme(const char *scheme, size_t n)
{
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (strlen(builtin[i]->scheme) == n && memcmp(scheme, builtin[i]->scheme, n) == 0)
            return builtin[i];
    for (size_t i = 0; i < NMODULES; i++) {
        struct module *m = &modules[i];
        if (strlen(m->scheme) != n || memcmp(scheme, m->scheme, n) != 0)
            continue;
        pthread_mutex_lock(&modules_lock);
        if (!m->tried) {
            m->tried = true;
            module_load(m);
        }
        pthread_mutex_unlock(&modules_lock);
        return m->ops;
    }
    return NULL;
}

static bool known_scheme(const char *scheme, size_t n)
{
    for (size_t i = 0; i < NMODULES; i++)
        if (strlen(modules[i].scheme) == n && memcmp(scheme, modules[i].scheme, n) == 0)
            return true;
    return false;
}

/* Finds the ops for uri's scheme and points *rest past "scheme://". */
static const struct erma_transport_ops *find(const char *uri, const char **rest)
{
    const char *sep = uri ? strstr(uri, "://") : NULL;
    if (!sep)
        return NULL;
    *rest = sep + 3;
    return find_scheme(uri, (size_t)(sep - uri));
}

bool erma_transport_available(const char *scheme)
{
    return scheme && find_scheme(scheme, strlen(scheme)) != NULL;
}

int erma_transport_cfg_resolve(const struct erma_transport_cfg *cfg,
                               struct erma_transport_cfg *out)
{
    *out = cfg ? *cfg : (struct erma_transport_cfg){0};
    if (out->mtu == 0)
        out->mtu = ERMA_DEFAULT_MTU;
    if (out->rx_ring == 0)
        out->rx_ring = 4096;
    if (out->mtu < 576 || out->mtu > 9000 || out->rx_ring > (1u << 24) ||
        !(out->rx_drop >= 0 && out->rx_drop <= 1))
        return ERMA_EINVAL;
    return ERMA_OK;
}


int erma_transport_open(const char *uri, const struct erma_transport_cfg *cfg,
                        struct erma_transport **out)
{
    const char *rest = NULL;
    if (!out)
        return ERMA_EINVAL;
    const char *sep = uri ? strstr(uri, "://") : NULL;
    if (!sep) {
        ERMA_ERROR("transport: '%s' is not a URI (want scheme://address, e.g. "
                   "udp://127.0.0.1:31850)", uri ? uri : "(null)");
        return ERMA_EADDR;
    }
    const struct erma_transport_ops *ops = find(uri, &rest);
    if (!ops) {
        const int n = (int)(sep - uri);
        if (!known_scheme(uri, (size_t)n)) /* a module that did not load said why */
            ERMA_ERROR("transport: no transport for scheme '%.*s' in %s (erma has udp, sim, "
                       "dpdk and verbs)", n, uri, uri);
        return ERMA_ENOTSUP;
    }
    struct erma_transport_cfg c;
    const int rc = erma_transport_cfg_resolve(cfg, &c);
    if (rc != ERMA_OK)
        return rc;
    const int rc2 = ops->open(rest, &c, out);
    if (rc2 != ERMA_OK)
        ERMA_ERROR("transport: cannot open %s: %s", uri, erma_strerror(rc2));
    if (rc2 == ERMA_OK && c.rx_drop > 0) {
        (*out)->drop_threshold = c.rx_drop >= 1 ? UINT64_MAX : (uint64_t)(c.rx_drop * 0x1p64);
        (*out)->drop_state = c.drop_seed;
    }
    return rc2;
}

void erma_transport_close(struct erma_transport *tr)
{
    if (tr)
        tr->ops->close(tr);
}

int erma_transport_resolve(struct erma_transport *tr, const char *uri, struct erma_addr *out)
{
    const char *rest = NULL;
    if (!uri || find(uri, &rest) != tr->ops) {
        ERMA_ERROR("transport: cannot reach '%s' from a %s:// endpoint (peers have the "
                   "endpoint's own scheme)", uri ? uri : "(null)", tr->ops->scheme);
        return ERMA_EADDR;
    }
    const int rc = tr->ops->resolve(tr, rest, out);
    if (rc != ERMA_OK)
        ERMA_ERROR("transport: cannot resolve %s: %s", uri, erma_strerror(rc));
    return rc;
}

int erma_transport_addr_str(const struct erma_transport *tr, const struct erma_addr *addr,
                            char *buf, size_t len)
{
    const int n = snprintf(buf, len, "%s://", tr->ops->scheme);
    if (n < 0 || (size_t)n >= len)
        return ERMA_EINVAL;
    return tr->ops->addr_str(tr, addr, buf + n, len - (size_t)n);
}

int erma_transport_reg_mem(struct erma_transport *tr, void *addr, size_t len)
{
    return tr->ops->reg_mem ? tr->ops->reg_mem(tr, addr, len) : ERMA_OK;
}

int erma_transport_wait(struct erma_transport *tr, uint64_t timeout_ns)
{
    return tr->ops->wait ? tr->ops->wait(tr, timeout_ns) : ERMA_ENOTSUP;
}
