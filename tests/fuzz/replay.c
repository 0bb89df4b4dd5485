/* Runs a libFuzzer driver without libFuzzer: every file of the directories
 * given, whole and cut short at every length up to 512 bytes, through
 * LLVMFuzzerTestOneInput. scripts/test-c.sh links each tests/fuzz driver
 * with this under ASan and UBSan, so the seed corpora and the drivers'
 * invariants are checked by `make test` as well as by `make fuzz`. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#define PREFIXES_UP_TO 512

static long run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
    if (data == NULL || fread(data, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(data);
        return -1;
    }
    fclose(f);
    long runs = 0;
    for (long n = 0; n < size && n < PREFIXES_UP_TO; n++, runs++) {
        /* A copy of exactly n bytes, so ASan sees a read past the cut. */
        uint8_t *cut = malloc(n > 0 ? (size_t)n : 1);
        memcpy(cut, data, (size_t)n);
        LLVMFuzzerTestOneInput(cut, (size_t)n);
        free(cut);
    }
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return runs + 1;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    long runs = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *dir = opendir(argv[i]);
        if (dir == NULL) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            return 1;
        }
        for (struct dirent *e; (e = readdir(dir)) != NULL;) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            long n = run_file(path);
            if (n < 0) {
                fprintf(stderr, "replay: cannot read %s\n", path);
                closedir(dir);
                return 1;
            }
            runs += n;
            files++;
        }
        closedir(dir);
    }
    printf("replay: %ld inputs from %ld files\n", runs, files);
    return 0;
}
