// fmt's compiled part (what libfmt.so holds), built into the `ringrun` executable itself. With it
// and a static libstdc++, ringrun loads no C++ shared library at start: on this VM the loader
// spent ~1.7 ms mapping and relocating libstdc++ and libfmt for every launch. format-inl.h is
// fmt's own implementation, installed with its headers; the instantiations below are those
// ringrun's code refers to (the link fails if one is missing).
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto decimal_point_impl(locale_ref) -> char;
}  // namespace detail
FMT_END_NAMESPACE
