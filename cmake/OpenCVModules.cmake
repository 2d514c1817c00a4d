# Finds the OpenCV modules convoy uses (core, imgproc) from Debian's per-module -dev packages, which
# ship no CMake config of their own. imgcodecs stays out: PNG goes through libpng directly.
find_path(CONVOY_OPENCV_INCLUDE opencv2/core.hpp PATH_SUFFIXES opencv4 REQUIRED)
add_library(convoy_opencv INTERFACE)
target_include_directories(convoy_opencv SYSTEM INTERFACE ${CONVOY_OPENCV_INCLUDE})
foreach(mod core imgproc)
  find_library(CONVOY_OPENCV_${mod} opencv_${mod} REQUIRED)
  target_link_libraries(convoy_opencv INTERFACE ${CONVOY_OPENCV_${mod}})
endforeach()
add_library(convoy::opencv ALIAS convoy_opencv)
