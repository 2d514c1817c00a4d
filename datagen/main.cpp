// datagen entry point (placeholder until the datagen stages land).
#include "shared/error.h"
static int body(int, char**) { return 0; }
int main(int argc, char** argv) { return convoy::run_main("datagen", body, argc, argv); }
