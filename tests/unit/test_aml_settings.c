/* test_aml_settings.c — azureml.yml checked and typed (engine/azureml/settings.c)
 * and the duration rule it shares with node{timeout =} (engine/duration.c). */
#include "check.h"
#include "azureml/datastore.h"
#include "azureml/settings.h"
#include "duration.h"
#include "util.h"

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char project[PATH_MAX], home[PATH_MAX];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A throwaway project whose conf/prod/azureml.yml holds `yaml` (and
 * conf/base/parameters.yml holds `params`); returns the loaded settings' rc. */
static int load(const char *yaml, const char *params, struct aml_settings *s, char *err, size_t errlen)
{
    snprintf(project, sizeof project, "/tmp/flow_test_aml_XXXXXX");
    if (!mkdtemp(project) || chdir(project) != 0) {
        perror(project);
        exit(2);
    }
    mkdir("conf", 0755);
    mkdir("conf/base", 0755);
    mkdir("conf/prod", 0755);
    FILE *f = fopen("conf/prod/azureml.yml", "w");
    fputs(yaml, f);
    fclose(f);
    f = fopen("conf/base/parameters.yml", "w");
    fputs(params ? params : "{}\n", f);
    fclose(f);
    int rc = -1;
    struct config *cfg = config_load("conf", "prod", err, errlen);
    if (cfg && config_resolve(cfg, err, errlen) == 0) rc = aml_settings_load(cfg, s, err, errlen);
    config_free(cfg);
    if (chdir(home) != 0) perror(home);
    nftw(project, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

#define BASE "subscription_id: 00000000-1111-2222-3333-444444444444\n" \
             "resource_group: rg-ml\nworkspace: ws1\nexperiment_name: exp\n"

static void test_full_settings(void)
{
    struct aml_settings s;
    char err[512] = "";
    int rc = load(BASE "compute:\n  __default__: cpu-cluster\n  gpu: gpu-cluster\n  big: big-cluster\n"
                  "environment: azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest\n"
                  "instance_type: Standard_NC24ads_A100_v4\nshm_size: 16g\ntimeout: 6h\n"
                  "environment_variables: {NCCL_DEBUG: INFO, OMP_NUM_THREADS: 4}\n"
                  "dispatch: tagged\npoll_interval: 30s\narm_endpoint: https://127.0.0.1:8443/\n"
                  "authority_host: login.example.test\n", NULL, &s, err, sizeof err);
    CHECK(rc == 0);
    CHECK_STR(err, "");
    CHECK_STR(s.workspace, "ws1");
    CHECK_STR(s.default_compute, "cpu-cluster");
    CHECK(s.n_computes == 2);
    CHECK_STR(s.computes[0].tag, "big");
    CHECK_STR(s.shm_size, "16g");
    CHECK(s.timeout == 6 * 3600);
    CHECK(s.poll_interval == 30);
    CHECK(s.dispatch == AML_DISPATCH_TAGGED);
    CHECK(s.n_env_vars == 2);
    CHECK_STR(s.env_vars[1].name, "OMP_NUM_THREADS");
    CHECK_STR(s.env_vars[1].value, "4");
    CHECK_STR(s.arm_endpoint, "https://127.0.0.1:8443");
    CHECK_STR(s.authority_host, "https://login.example.test");
    CHECK_STR(s.api_version, "2024-10-01");
    const char *tags[] = { "train", "gpu" };
    CHECK_STR(aml_compute_for(&s, tags, 2, err, sizeof err), "gpu-cluster");
    CHECK_STR(aml_compute_for(&s, tags, 1, err, sizeof err), "cpu-cluster");
    const char *two[] = { "gpu", "big" };
    CHECK(aml_compute_for(&s, two, 2, err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "tags 'gpu' and 'big' both name a compute");
    CHECK(aml_tags_name_compute(&s, tags, 2));
    CHECK(!aml_tags_name_compute(&s, tags, 1));
    char *ws = aml_workspace_id(&s);
    CHECK_STR(ws, "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/rg-ml/providers/"
                  "Microsoft.MachineLearningServices/workspaces/ws1");
    free(ws);
    aml_settings_free(&s);
}

static void test_no_section(void)
{
    struct aml_settings s;
    char err[512] = "";
    CHECK(load("{}\n", NULL, &s, err, sizeof err) == 1);
}

/* Each bad file gives one message naming the file and line and the field. */
static void test_errors(void)
{
    static const struct { const char *yaml, *want; } cases[] = {
        { "workspace: ws1\n", "conf/prod/azureml.yml: azureml setting 'subscription_id' is missing" },
        { BASE "compute: c\nenvironment: e:1\nworkspce: x\n",
          "conf/prod/azureml.yml:7: unknown azureml setting 'workspce' (did you mean 'workspace'?)" },
        { BASE "environment: e:1\n", "azureml setting 'compute' is missing" },
        { BASE "compute: {gpu: 3}\nenvironment: e:1\n",
          "conf/prod/azureml.yml:5: compute.gpu must be the name of a compute cluster, got a number" },
        { BASE "compute: c\nenvironment: e:1\nshm_size: lots\n",
          "conf/prod/azureml.yml:7: shm_size must be a size like \"16g\"" },
        { BASE "compute: c\nenvironment: e:1\ntimeout: soon\n",
          "conf/prod/azureml.yml:7: timeout must be a positive duration like 90 (seconds), \"30m\" or \"2h\", "
          "got soon" },
        { BASE "compute: c\nenvironment: e:1\npoll_interval: -1\n",
          "conf/prod/azureml.yml:7: poll_interval must be a positive duration like 90 (seconds), \"30m\" or "
          "\"2h\", got -1" },
        { BASE "compute: c\nenvironment: e:1\npoll_interval: .inf\n",
          "conf/prod/azureml.yml:7: poll_interval must be a positive duration like 90 (seconds), \"30m\" or "
          "\"2h\", got inf" },
        { BASE "compute: c\nenvironment: e:1\ndispatch: some\n",
          "conf/prod/azureml.yml:7: dispatch must be distributed, tagged, all or none, got \"some\"" },
        { BASE "compute: c\nenvironment: e:1\narm_endpoint: http://x\n",
          "conf/prod/azureml.yml:7: arm_endpoint must be an https:// URL" },
        { BASE "compute: c\nenvironment: e:1\napi_version: latest\n", "api_version must be a date" },
        { BASE "compute: c\nenvironment: {name: e:1, flow: true}\n", "unknown key 'flow' in environment" },
        { BASE "compute: c\nenvironment: e:1\nenvironment_variables: {1X: a}\n", "'1X' is not a variable name" },
        { BASE "compute: c\nenvironment: e:1\nblob_endpoint: http://blob.example.com/acct\n",
          "conf/prod/azureml.yml:7: blob_endpoint must be an https:// URL (http:// only to this machine" },
        { BASE "compute: c\nenvironment: e:1\nblob_endpoint: http://127.0.0.1.evil.com/x\n",
          "blob_endpoint must be an https:// URL" },
        { BASE "compute: c\nenvironment: e:1\ninput_mode: ReadWriteMount\n",
          "conf/prod/azureml.yml:7: input_mode must be ReadOnlyMount or Download, got \"ReadWriteMount\"" },
        { BASE "compute: c\nenvironment: e:1\noutput_mode: Download\n",
          "conf/prod/azureml.yml:7: output_mode must be ReadWriteMount or Upload, got \"Download\"" },
        { BASE "compute: c\nenvironment: e:1\ndatastore: my.store\n",
          "conf/prod/azureml.yml:7: datastore \"my.store\" is not a valid Azure ML name" },
        { BASE "compute: params:cluter\nenvironment: e:1\n",
          "compute is \"params:cluter\" but there is no parameter 'cluter' (did you mean 'cluster'?)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct aml_settings s;
        char err[512] = "";
        CHECK(load(cases[i].yaml, "cluster: gpu-a\n", &s, err, sizeof err) == -1);
        CHECK_CONTAINS(err, cases[i].want);
    }
}

static void test_params_and_environment(void)
{
    struct aml_settings s;
    char err[512] = "";
    CHECK(load(BASE "compute: params:cluster\nenvironment: {name: flow-torch@latest, flow_installed: true}\n",
               "cluster: gpu-a\n", &s, err, sizeof err) == 0);
    CHECK_STR(s.default_compute, "gpu-a");
    CHECK(s.flow_installed);
    bool latest;
    CHECK(aml_environment_id(&s, s.environment, &latest, err, sizeof err) == NULL && latest);
    char *id = aml_environment_id(&s, "azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest", &latest, err, sizeof err);
    CHECK_STR(id, "azureml:AzureML-acpt-pytorch-2.2-cuda12.1@latest");
    free(id);
    id = aml_environment_id(&s, "azureml://registries/azureml/environments/acpt/labels/latest", &latest, err,
                            sizeof err);
    CHECK_STR(id, "azureml://registries/azureml/environments/acpt/labels/latest");
    free(id);
    id = aml_environment_id(&s, "flow-torch:3", &latest, err, sizeof err);
    CHECK_CONTAINS(id, "/workspaces/ws1/environments/flow-torch/versions/3");
    CHECK(!latest);
    free(id);
    CHECK(aml_environment_id(&s, "not an env", &latest, err, sizeof err) == NULL && !latest);
    CHECK_CONTAINS(err, "is not one Azure ML knows");
    aml_settings_free(&s);
}

static void test_durations(void)
{
    static const struct { const char *text; double want; } good[] = {
        { "90", 90 }, { "1.5", 1.5 }, { "30s", 30 }, { "15m", 900 }, { "2h", 7200 }, { "1d", 86400 },
        { "500ms", 0.5 }, { "1h30m", 5400 }, { " 1d 12h ", 129600 }, { "1.5h", 5400 },
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        double v = -1;
        CHECK(duration_parse(good[i].text, false, &v));
        CHECK(v == good[i].want);
    }
    const char *bad[] = { "", "soon", "1x", "-1", ".5", "1e3", "h", "0", "0s", "1h30" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        double v;
        CHECK(!duration_parse(bad[i], false, &v));
    }
    double v = -1;
    CHECK(duration_parse("0s", true, &v) && v == 0);
    char buf[64];
    duration_iso8601(5400, buf, sizeof buf);
    CHECK_STR(buf, "PT1H30M");
    duration_iso8601(6 * 3600, buf, sizeof buf);
    CHECK_STR(buf, "PT6H");
    duration_iso8601(86400 + 1.5, buf, sizeof buf);
    CHECK_STR(buf, "P1DT1.5S");
    duration_iso8601(86400, buf, sizeof buf);
    CHECK_STR(buf, "P1D");
}

/* Where data crosses: the datastore, its endpoint, and how jobs get it. */
static void test_data_settings(void)
{
    struct aml_settings s;
    char err[512] = "";
    CHECK(load(BASE "compute: c\nenvironment: e:1\n", NULL, &s, err, sizeof err) == 0);
    CHECK_STR(s.datastore, "workspaceblobstore");
    CHECK(s.blob_endpoint == NULL);
    CHECK_STR(s.input_mode, "ReadOnlyMount");
    CHECK_STR(s.output_mode, "ReadWriteMount");
    aml_settings_free(&s);
    CHECK(load(BASE "compute: c\nenvironment: e:1\ndatastore: training_data\n"
               "blob_endpoint: http://127.0.0.1:10000/devstoreaccount1/\ninput_mode: Download\noutput_mode: Upload\n",
               NULL, &s, err, sizeof err) == 0);
    CHECK_STR(s.datastore, "training_data");
    CHECK_STR(s.blob_endpoint, "http://127.0.0.1:10000/devstoreaccount1");
    CHECK_STR(s.input_mode, "Download");
    CHECK_STR(s.output_mode, "Upload");
    aml_settings_free(&s);
    CHECK(load(BASE "compute: c\nenvironment: e:1\nblob_endpoint: https://acct.blob.core.chinacloudapi.cn\n",
               NULL, &s, err, sizeof err) == 0);
    CHECK_STR(s.blob_endpoint, "https://acct.blob.core.chinacloudapi.cn");
    aml_settings_free(&s);
    /* the container's URL: the datastore's account and endpoint, unless blob_endpoint replaces them */
    char *url = aml_datastore_container_url(NULL, "https", "acct", "core.windows.net", "c1");
    CHECK_STR(url, "https://acct.blob.core.windows.net/c1");
    free(url);
    url = aml_datastore_container_url("http://127.0.0.1:10000/devstoreaccount1", "https", "acct", "core.windows.net", "c1");
    CHECK_STR(url, "http://127.0.0.1:10000/devstoreaccount1/c1");
    free(url);
}

static void test_names(void)
{
    CHECK(aml_valid_name("flow-train_01"));
    CHECK(!aml_valid_name("-x"));
    CHECK(!aml_valid_name("a.b"));
    CHECK(!aml_valid_name(""));
}

int main(void)
{
    if (!getcwd(home, sizeof home)) return 2;
    RUN(test_full_settings);
    RUN(test_no_section);
    RUN(test_errors);
    RUN(test_params_and_environment);
    RUN(test_durations);
    RUN(test_data_settings);
    RUN(test_names);
    return CHECK_DONE("aml_settings");
}
