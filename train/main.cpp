// train entry point (placeholder until the engine lands).
#include "shared/error.h"
static int body(int, char**) { return 0; }
int main(int argc, char** argv) { return convoy::run_main("train", body, argc, argv); }
