/* test_aml_job_body.c — a step as an Azure ML job body (engine/azureml/job_body.c):
 * the command job, the same made a sweep job's trial, and job names.  The
 * end-to-end tests send these bodies to the double, which checks them against
 * the published schema; this checks the shapes themselves. */
#include "check.h"
#include "azureml/job_body.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const struct aml_data_binding outputs[] = {
    { "model", "uri_folder", "azureml://datastores/ws/paths/runs/j/trials/${{name}}/model/", "ReadWriteMount" },
};

static struct aml_job_spec spec(void)
{
    static const struct aml_env_var env[] = { { "A", "1" } };
    return (struct aml_job_spec){
        .display_name = "train", .experiment = "exp", .command = "python train.py --lr ${{search_space.lr}}",
        .code_id = "/codes/c/versions/1", .environment_id = "azureml:AzureML-x@latest", .compute_id = "/computes/gpu",
        .instance_count = 2, .framework = AML_FRAMEWORK_PYTORCH, .processes_per_node = 4, .timeout = 5400,
        .env = env, .n_env = 1, .outputs = outputs, .n_outputs = 1,
    };
}

static cJSON *props_of(const char *body)
{
    cJSON *root = cJSON_Parse(body);
    CHECK(root != NULL);
    return root;
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) x = cJSON_GetObjectItemCaseSensitive(x, b);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static void test_command_job(void)
{
    struct aml_job_spec s = spec();
    char *body = aml_job_body(&s);
    cJSON *root = props_of(body), *p = cJSON_GetObjectItemCaseSensitive(root, "properties");
    CHECK_STR(str_at(p, "jobType", NULL), "Command");
    CHECK_STR(str_at(p, "command", NULL), s.command);
    CHECK_STR(str_at(p, "limits", "timeout"), "PT1H30M");
    CHECK_STR(str_at(p, "distribution", "distributionType"), "PyTorch");
    CHECK(cJSON_GetObjectItemCaseSensitive(p, "trial") == NULL);
    cJSON_Delete(root);
    free(body);
}

static void test_sweep_job(void)
{
    struct aml_job_spec s = spec();
    s.sweep_json = "{\"samplingAlgorithm\": {\"samplingAlgorithmType\": \"Grid\"},"
                   " \"searchSpace\": {\"lr\": [\"choice\", [[0.1, 0.5]]]},"
                   " \"objective\": {\"primaryMetric\": \"loss\", \"goal\": \"Minimize\"},"
                   " \"limits\": {\"maxTotalTrials\": 2, \"maxConcurrentTrials\": 1}}";
    char *body = aml_job_body(&s);
    cJSON *root = props_of(body), *p = cJSON_GetObjectItemCaseSensitive(root, "properties");
    CHECK_STR(str_at(p, "jobType", NULL), "Sweep");
    /* the command job's own fields are the trial's */
    CHECK_STR(str_at(p, "trial", "command"), s.command);
    CHECK_STR(str_at(p, "trial", "codeId"), s.code_id);
    CHECK_STR(str_at(p, "trial", "environmentId"), s.environment_id);
    CHECK_STR(str_at(cJSON_GetObjectItemCaseSensitive(p, "trial"), "distribution", "distributionType"), "PyTorch");
    CHECK_STR(str_at(cJSON_GetObjectItemCaseSensitive(p, "trial"), "environmentVariables", "A"), "1");
    for (const char *const *k = (const char *const[]){ "command", "codeId", "environmentId", "resources",
                                                       "distribution", "environmentVariables", NULL }; *k; k++)
        CHECK(cJSON_GetObjectItemCaseSensitive(p, *k) == NULL);
    /* the job's: compute, outputs, display name; the time limit is each trial's */
    CHECK_STR(str_at(p, "computeId", NULL), "/computes/gpu");
    CHECK_STR(str_at(cJSON_GetObjectItemCaseSensitive(p, "outputs"), "model", "uri"), outputs[0].uri);
    CHECK_STR(str_at(p, "limits", "jobLimitsType"), "Sweep");
    CHECK_STR(str_at(p, "limits", "trialTimeout"), "PT1H30M");
    CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "limits"), "timeout") == NULL);
    CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "limits"), "maxTotalTrials")->valueint
          == 2);
    CHECK_STR(str_at(p, "objective", "primaryMetric"), "loss");
    CHECK_STR(str_at(p, "samplingAlgorithm", "samplingAlgorithmType"), "Grid");
    cJSON_Delete(root);
    free(body);
    /* no limits given, no time limit: the sweep's limits say only their type */
    s.sweep_json = "{\"objective\": {\"primaryMetric\": \"loss\", \"goal\": \"Maximize\"}}";
    s.timeout = 0;
    body = aml_job_body(&s);
    root = props_of(body);
    p = cJSON_GetObjectItemCaseSensitive(root, "properties");
    CHECK_STR(str_at(p, "limits", "jobLimitsType"), "Sweep");
    CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "limits"), "trialTimeout") == NULL);
    cJSON_Delete(root);
    free(body);
    /* what is not a JSON object is refused */
    s.sweep_json = "[1, 2]";
    CHECK(aml_job_body(&s) == NULL);
    s.sweep_json = "{\"objective\": ";
    CHECK(aml_job_body(&s) == NULL);
}

static void test_job_names(void)
{
    char *a = aml_job_name("run1", "eval.report", "fp", 1), *b = aml_job_name("run1", "eval.report", "fp", 2);
    CHECK(strncmp(a, "flow-eval-report-", 17) == 0 && strlen(a) == 17 + 12);
    CHECK(strncmp(b, a, strlen(a)) == 0 && strcmp(b + strlen(a), "-a2") == 0);
    free(a);
    free(b);
}

int main(void)
{
    RUN(test_command_job);
    RUN(test_sweep_job);
    RUN(test_job_names);
    return CHECK_DONE("aml_job_body");
}
