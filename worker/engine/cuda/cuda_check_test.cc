// The CUDA/cuBLASLt/NCCL status mapping (cuda_check.h). Pure host code: it
// runs in CI without a GPU.
#include "worker/engine/cuda/cuda_check.h"

#include "gtest/gtest.h"

namespace tessera {
namespace cuda {
namespace {

absl::Status ReturnsCuda(cudaError_t err) {
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

TEST(CudaCheck, SuccessIsOk) {
  EXPECT_TRUE(ReturnsCuda(cudaSuccess).ok());
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x", "f", 1).ok());
  EXPECT_TRUE(NcclStatus(ncclSuccess, "x", "f", 1).ok());
}

TEST(CudaCheck, StickyErrorsAreInternalAndFlagged) {
  for (cudaError_t err : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert,
                          cudaErrorMisalignedAddress}) {
    absl::Status s = ReturnsCuda(err);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_TRUE(IsStickyCudaStatus(s)) << s;
    EXPECT_NE(s.message().find("sticky"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(cudaGetErrorName(err)), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("cuda_check_test.cc:"), absl::string_view::npos) << s;
  }
}

TEST(CudaCheck, NonStickyErrorsAreNotFlagged) {
  absl::Status oom = ReturnsCuda(cudaErrorMemoryAllocation);
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted) << oom;
  EXPECT_FALSE(IsStickyCudaStatus(oom));
  absl::Status bad = ReturnsCuda(cudaErrorInvalidValue);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_FALSE(IsStickyCudaStatus(bad));
  absl::Status other = ReturnsCuda(cudaErrorNotReady);
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal) << other;
  EXPECT_FALSE(IsStickyCudaStatus(other));
}

TEST(CudaCheck, CublasAndNcclCodes) {
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_NOT_SUPPORTED, "x", "f", 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "x", "f", 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "x", "f", 1).code(),
            absl::StatusCode::kInternal);
  absl::Status nccl = NcclStatus(ncclRemoteError, "ncclAllReduce(...)", "f.cc", 7);
  EXPECT_EQ(nccl.code(), absl::StatusCode::kAborted);
  EXPECT_NE(nccl.message().find("f.cc:7"), absl::string_view::npos) << nccl;
  EXPECT_TRUE(NcclStatus(ncclInProgress, "x", "f", 1).ok());
}

}  // namespace
}  // namespace cuda
}  // namespace tessera
