// Tools: a tiny RGB canvas, a 5x7 bitmap font and a PNG writer with no dependency.
// The PNG holds one IDAT of zlib "stored" deflate blocks (no compression), CRC-32 per
// chunk and the zlib Adler-32; every viewer reads it. Only what the charts need.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cli {

using Rgb = uint32_t;  // 0xRRGGBB

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return w_; }
  int height() const { return h_; }

  void pixel(int x, int y, Rgb c);
  void fill_rect(int x0, int y0, int x1, int y1, Rgb c);  // inclusive corners
  void line(int x0, int y0, int x1, int y1, Rgb c, int thickness = 1);
  // Text in the 5x7 font, each glyph `scale` pixels a dot, with (x, y) its top-left corner.
  // Lowercase prints as uppercase; characters without a glyph print as '?'.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 2);
  static int text_width(const std::string& s, int scale = 2) {
    return s.empty() ? 0 : int(s.size()) * 6 * scale - scale;
  }
  static int text_height(int scale = 2) { return 7 * scale; }

  bool write_png(const std::string& path) const;

 private:
  int w_, h_;
  std::vector<uint8_t> rgb_;
};

}  // namespace cli
