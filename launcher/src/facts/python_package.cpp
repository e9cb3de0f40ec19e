#include "facts/python_package.hpp"

#include <fmt/format.h>

namespace ringrun {

namespace fs = std::filesystem;

std::optional<std::string> find_python_package_dir(const fs::path& bin_dir) {
  if (bin_dir.empty()) return std::nullopt;
  std::error_code ec;
  const fs::path build_tree = (bin_dir / ".." / "python").lexically_normal();
  if (fs::is_regular_file(build_tree / "ringrun" / "__init__.py", ec)) return build_tree.string();
  const fs::path installed = (bin_dir / ".." / "lib" / "python3" / "dist-packages").lexically_normal();
  if (fs::is_directory(installed / "ringrun", ec)) return installed.string();
  return std::nullopt;
}

fs::path installed_root(const fs::path& bin_dir) {
  const fs::path dir = bin_dir.lexically_normal();
  const fs::path package = dir.parent_path();
  const std::string site = package.parent_path().filename().string();
  if (dir.filename() == "bin" && package.filename() == "ringrun" && (site == "site-packages" || site == "dist-packages"))
    return package.parent_path().parent_path().parent_path().parent_path();  // <root>/lib/pythonX.Y/site-packages
  return dir.parent_path();
}

std::optional<std::string> find_virtualenv(const fs::path& bin_dir) {
  if (bin_dir.empty() || bin_dir.lexically_normal().filename() != "bin") return std::nullopt;
  std::error_code ec;
  const fs::path root = installed_root(bin_dir);
  if (fs::is_regular_file(root / "pyvenv.cfg", ec) && fs::is_directory(root / "bin", ec)) return root.string();
  return std::nullopt;
}

fs::path executable_path() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path("ringrun") : exe;
}

fs::path executable_dir() { return executable_path().parent_path(); }

std::string python_package_candidates(const fs::path& bin_dir) {
  return fmt::format("{} or {}", (bin_dir / ".." / "python").lexically_normal().string(),
                     (bin_dir / ".." / "lib" / "python3" / "dist-packages").lexically_normal().string());
}

}  // namespace ringrun
